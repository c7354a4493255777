"""LoRA (issue 38) on gloo processes, on every family's tiny build: one step under DP 2 (FSDP2),
CP 2 and TP 2 (adapters split as their layers, ``tensor_parallel.linear``; Qwen3.5's DeltaNet
projections too) equals a plain single-process Hugging Face + PEFT forward of each sequence (loss, adapter
gradients, adapters after the step; Qwen3-VL-MoE's float32 routing and Qwen3.5's float32 DeltaNet
path within their full-weight tests' bounds, ``TOLERANCES``), every frozen weight stays
bit-identical, a push (gathered from DP or TP shards) carries only the adapters (the first one
also the whole base) and leaves an embedded engine built from other weights scoring as the
trainer's model does, the checkpoint's PEFT folder reloads on the family's transformers class
with the same logits, and a checkpoint saved under TP 2 resumes (adapters and their optimizer
state) to the step the uninterrupted trainer takes.

The adapters' ``B`` is set to non-zero values before the step (PEFT starts it at 0, where ``A``'s
gradient is 0 and engine == trainer holds trivially)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from transformers import AutoProcessor

from tests.helpers.chat import part
from tests.helpers.trainer_workload import reference_step
from vlrl.bench.trainer_workload import Workload, make_workload, reference_token_logprobs
from vlrl.bench.worlds import World, run_worlds
from tests.integration.train.test_trainer_families import MOE_LOSS
from tests.integration.train.test_trainer_parallel import LOSS, trainer_config
from vlrl.models import build_tiny, family_of
from vlrl.models.adapters import LORA_A, LORA_B
from vlrl.pack import Layout
from vlrl.rollout.engine.images import preprocess
from vlrl.rollout.engine.runner import ModelRunner
from vlrl.train.checkpoint_io import ADAPTER_CONFIG, ADAPTER_DIR, ADAPTER_WEIGHTS
from vlrl.train.lora import LoRA

LORAS = {
    "qwen2_vl": LoRA.Config(rank=4, alpha=8, tower_modules=("attn.qkv",), merger_modules=("mlp.0",),
                            full_modules=("model.language_model.norm", "lm_head")),  # fmt: skip
    "qwen2_5_vl": LoRA.Config(rank=2, alpha=4, tower_modules=("mlp.up_proj",), merger_modules=("mlp.2",)),
    "qwen3_vl": LoRA.Config(rank=4, alpha=8, llm_modules=("q_proj", "down_proj"), tower_modules=("attn.proj",),
                            merger_modules=("linear_fc1",)),  # fmt: skip
    # the default llm_modules: the attention's q/k/v/o (experts and router frozen)
    "qwen3_vl_moe": LoRA.Config(rank=4, alpha=8, merger_modules=("linear_fc2",)),
    # the default llm_modules: the DeltaNet layer's in_proj_qkv/z/b/a and out_proj, the full-attention
    # layer's q/k/v/o, both layers' MLPs
    "qwen3_5": LoRA.Config(rank=4, alpha=8, tower_modules=("attn.qkv",)),
}
LOSSES = {"qwen3_vl_moe": MOE_LOSS}
"""Qwen3-VL-MoE's load-balancing term weighted up as in ``test_trainer_families``: its router is
frozen, but the term's gradient reaches the attention adapters through the hidden states."""
TOLERANCES = {
    # Routing runs in float32 whatever the dtype (``test_trainer_families``): a 1e-16 difference in
    # a hidden state moves a routing weight by a float32 rounding, which reaches the loss at ~1e-8
    # relative, gradients at ~1e-8 and Adam's first step at ~1e-6; a wrong route is ~1e-2 off.
    "qwen3_vl_moe": {"loss_rel": 1e-7, "grad_atol": 1e-7, "weight_atol": 1e-5},
    # transformers' DeltaNet path computes in float32 whatever the dtype (``test_trainer_hybrid``):
    # gradients agree at ~1e-10, Adam's first step near eps at ~1e-6; a state leaking across a
    # segment border, or a TP rank's adapter on another rank's heads, is ~1e-3 off.
    "qwen3_5": {"loss_rel": 1e-8, "grad_atol": 3e-8, "weight_atol": 1e-5},
}
"""Families whose float32 paths need the looser bounds their full-weight parallel == serial tests
use; the others: loss 1e-9 relative, gradients 1e-10, weights after the step 1e-8 (Adam's first
step turns float noise in a gradient near eps into ~1e-9)."""
EXACT = {"loss_rel": 1e-9, "grad_atol": 1e-10, "weight_atol": 1e-8}
LAYOUTS = [(2, 1, 1), (1, 2, 1), (1, 1, 2)]
FULL = {"model.language_model.norm.weight", "lm_head.weight"}
"""The weights of qwen2_vl's ``full_modules``: trained in full beside the adapters."""


def nonzero_b(names_shapes) -> dict[str, torch.Tensor]:
    """Deterministic non-zero values for every ``lora_B`` (float64)."""
    return {
        name: 0.05 * torch.sin(torch.arange(int(np.prod(shape)), dtype=torch.float64) + i).reshape(shape)
        for i, (name, shape) in enumerate(sorted(names_shapes))
        if ".lora_B." in name
    }


def lora_main(rank: int, world: int, path: str, work: Workload, ckpt: str, config) -> dict | None:
    """``LAYOUTS``' steps (``B`` set non-zero first); on the first, a second step, its pushes and a
    checkpoint; under TP a checkpoint, a trainer resumed from it, and one more step of each.
    Rank 0 returns ``{layout: results}``."""
    store = work.store()
    results = {}
    for shape in LAYOUTS:
        trainer = config.build(model_path=path, store=store, layout=Layout(*shape))
        hf = trainer.model.model
        b = nonzero_b((n, p.shape) for n, p in hf.named_parameters())
        set_model_state_dict(hf, b, options=StateDictOptions(full_state_dict=True, strict=False))
        metrics = trainer.forward_backward(work.metas)
        grads = {}
        for name, param in hf.named_parameters():
            if param.grad is not None:
                grad = param.grad.full_tensor() if hasattr(param.grad, "full_tensor") else param.grad
                grads[name] = grad.detach().clone()
        trainer.apply_gradients()
        weights = {n: v.clone() for n, v in trainer.model.full_state_dict()}
        first_push = trainer.push_state()
        out = {"metrics": metrics, "grads": grads, "weights": weights, "first_push": first_push}
        if shape == LAYOUTS[0]:
            trainer.step(work.metas)  # a second step: the next push replaces the first's adapters
            out.update(second_push=trainer.push_state(), second_weights={n: v.clone() for n, v in trainer.model.full_state_dict()})
            out.update(merged_push=trainer.push_state(merged=True))  # what VLLMEngine is sent
            trainer.save(ckpt)
        if shape == (1, 1, 2):  # save and resume under TP: the next step of each must agree
            trainer.save(ckpt + "-tp")
            resumed = config.build(model_path=path, store=store, layout=Layout(*shape))
            resumed.load(ckpt + "-tp")
            out.update(tp_loaded={n: v.clone() for n, v in resumed.model.full_state_dict()})
            trainer.step(work.metas)
            resumed.step(work.metas)
            out.update(
                tp_continued={n: v.clone() for n, v in trainer.model.full_state_dict()},
                tp_resumed={n: v.clone() for n, v in resumed.model.full_state_dict()},
            )
            resumed.close()
        results[shape] = out
        trainer.close()
    return results if rank == 0 else None


@pytest.fixture(scope="module")
def spawned(tmp_path_factory) -> dict:
    """Each family's checkpoint, workload, config, rank 0's results and checkpoint folder: every
    family's 2-rank world in one spawn (``vlrl.bench.worlds``)."""
    tmp = tmp_path_factory.mktemp("lora")
    builds, worlds = {}, []
    for family in sorted(LORAS):
        path = str(build_tiny(family, tmp / family / "model"))
        work = make_workload(path, members=2)  # 4 sequences: 2 per DP rank, windows across both CP ranks
        config = replace(trainer_config(LOSSES.get(family, LOSS)), lora=LORAS[family])
        builds[family] = (path, work, config, tmp / family / "ckpt")
        worlds.append(World(2, lora_main, (path, work, str(tmp / family / "ckpt"), config)))
    results = run_worlds(tmp / "worlds", worlds)
    return {family: (*build, ranks[0]) for (family, build), ranks in zip(builds.items(), results, strict=True)}


@pytest.fixture(scope="module", params=sorted(LORAS))
def lora_run(request, spawned):
    family = request.param
    path, work, config, ckpt, results = spawned[family]

    def adapt(model):
        LORAS[family].build(model)
        model.load_state_dict(nonzero_b((n, p.shape) for n, p in model.named_parameters()), strict=False)

    want = reference_step(
        path, work, config.loss, lr=config.optim.lr, betas=config.optim.betas, max_grad_norm=config.optim.max_grad_norm, adapt=adapt
    )  # fmt: skip
    return family, path, work, want, results, ckpt


def test_parallel_lora_step_equals_single_process_and_frozen_weights_stay(lora_run):
    family, path, _, (loss, grads, weights), results, _ = lora_run
    initial = family_of(path).load(path, dtype=torch.float64).state_dict()
    assert any(".lora_A." in n and g.abs().max() > 1e-6 for n, g in grads.items())  # A learns too: B is not 0
    assert any(".visual." in n for n in grads), "no tower/merger adapter has a gradient: the test misses that path"
    if family == "qwen3_5":
        assert any(".linear_attn." in n for n in grads), "no DeltaNet adapter has a gradient: the test misses that path"
    tol = TOLERANCES.get(family, EXACT)
    for shape in LAYOUTS:
        got = results[shape]
        assert got["metrics"]["loss"] == pytest.approx(loss, rel=tol["loss_rel"], abs=1e-12), shape
        assert set(got["grads"]) == set(grads) and all(".lora_" in n or n in FULL for n in grads), shape
        for name, want in grads.items():
            where = f"{shape} {name}"
            torch.testing.assert_close(got["grads"][name], want, rtol=1e-7, atol=tol["grad_atol"], msg=lambda m: f"{where}: {m}")
        for name, want in weights.items():
            where = f"{shape} {name}"
            torch.testing.assert_close(got["weights"][name], want, rtol=1e-7, atol=tol["weight_atol"], msg=lambda m: f"{where}: {m}")
        for name, value in got["weights"].items():
            if ".lora_" not in name and name not in FULL:  # frozen: bit-identical to the checkpoint
                assert torch.equal(value, initial[name.replace(".base_layer.", ".")]), (shape, name)


def test_a_push_carries_only_adapters_and_the_engine_scores_as_the_trainer(lora_run, tmp_path):
    """The engine is built from other weights than the trainer's checkpoint, as in a run that
    resumed or started from a full-weight warm start (the job's engines load the job's model): the
    first push must carry the whole base, or the engine keeps its own embeddings, norms, biases
    and frozen tower under the trainer's adapters."""
    family, path, work, _, results, _ = lora_run
    got = results[LAYOUTS[0]]
    first, second = got["first_push"], got["second_push"]
    modules = sorted(n.removesuffix(LORA_A) for n in second if n.endswith(LORA_A))
    full = FULL if LORAS[family].full_modules else set()
    assert modules and set(second) == {m + s for m in modules for s in (LORA_A, LORA_B)} | full
    checkpoint = family_of(path).load(path).state_dict()
    assert set(first) == set(second) | set(checkpoint)  # the first push adds the whole base
    tp_first = results[(1, 1, 2)]["first_push"]  # gathered from TP shards: the push the engine scores below
    assert tp_first.keys() == first.keys()
    for name, want in first.items():
        torch.testing.assert_close(tp_first[name], want, rtol=1e-7, atol=1e-8, msg=lambda m: f"1x1x2 push {name}: {m}")
    every = sum(v.numel() for v in checkpoint.values())
    assert sum(v.numel() for v in second.values()) < every / 3  # the tiny LM head is a quarter of the model
    other = build_tiny(family, tmp_path / "other", seed=1)  # the engine's model: not the trainer's
    runner = ModelRunner.load(other, dtype=torch.float64, device="cpu", stop_token_ids=frozenset())
    processor = AutoProcessor.from_pretrained(path)
    meta = work.metas[0]
    tokens = work.rows[meta.key]["token_ids"].astype(np.int64)
    pixels = [work.images[meta.images[i].store_key] for _, i in meta.image_offsets]
    images = tuple(preprocess(processor.image_processor, part(p)) for p in pixels)
    base = family_of(path).load(path, dtype=torch.float64)
    assert np.abs(runner.score(tokens, images) - reference_token_logprobs(base, processor, tokens, pixels)).max() > 1e-2
    for push, weights in ((first, got["weights"]), (second, got["second_weights"])):
        runner.load_weights(push)
        trained = family_of(path).load(path, dtype=torch.float64)
        LORAS[family].build(trained)
        trained.load_state_dict(weights)
        want = reference_token_logprobs(trained, processor, tokens, pixels)
        np.testing.assert_allclose(runner.score(tokens, images), want, rtol=0, atol=2e-6)  # the engine returns float32
    assert np.abs(reference_token_logprobs(base, processor, tokens, pixels) - want).max() > 1e-3  # the adapters matter


def test_the_checkpoint_adapter_folder_loads_with_peft(lora_run):
    from peft import PeftModel

    family, path, work, _, results, ckpt = lora_run
    folder = ckpt / ADAPTER_DIR
    assert (folder / ADAPTER_CONFIG).exists() and (folder / ADAPTER_WEIGHTS).exists()
    processor = AutoProcessor.from_pretrained(path)
    meta = work.metas[1]
    tokens = work.rows[meta.key]["token_ids"].astype(np.int64)
    pixels = [work.images[meta.images[i].store_key] for _, i in meta.image_offsets]
    peft_model = PeftModel.from_pretrained(family_of(path).load(path, dtype=torch.float64), str(folder))
    trained = family_of(path).load(path, dtype=torch.float64)
    LORAS[family].build(trained)
    trained.load_state_dict(results[LAYOUTS[0]]["second_weights"])
    merged = family_of(path).load(str(ckpt / "hf"), dtype=torch.float64)  # the checkpoint's hf/: adapters merged in
    pushed = results[LAYOUTS[0]]["merged_push"]
    assert pushed.keys() == merged.state_dict().keys()
    assert all(torch.equal(pushed[n], v) for n, v in merged.state_dict().items())
    want = reference_token_logprobs(trained, processor, tokens, pixels)
    np.testing.assert_allclose(reference_token_logprobs(peft_model, processor, tokens, pixels), want, rtol=0, atol=1e-10)
    np.testing.assert_allclose(reference_token_logprobs(merged, processor, tokens, pixels), want, rtol=0, atol=1e-9)


def test_a_checkpoint_saved_under_tp_resumes_to_the_same_next_step(lora_run):
    """Under 1x1x2: the resumed trainer holds the saved weights (adapters gathered from their TP
    shards and split again), its PEFT folder holds them too, and one more step of the resumed
    trainer equals that of the trainer that never stopped (the adapters' Adam state came back)."""
    from safetensors.torch import load_file

    family, path, _, _, results, ckpt = lora_run
    got = results[(1, 1, 2)]
    for name, want in got["weights"].items():
        assert torch.equal(got["tp_loaded"][name], want), name
    saved = load_file(str(ckpt.parent / "ckpt-tp" / ADAPTER_DIR / ADAPTER_WEIGHTS))
    adapters = {n: v for n, v in got["weights"].items() if ".lora_" in n}
    assert {"base_model.model." + n.replace(".default.", ".") for n in adapters} <= set(saved)
    for name, want in adapters.items():
        assert torch.equal(saved["base_model.model." + name.replace(".default.", ".")], want), name
    moved = max((got["tp_continued"][n] - got["weights"][n]).abs().max().item() for n in adapters)
    assert moved > 1e-6  # the extra step trained the adapters
    for name, want in got["tp_continued"].items():
        torch.testing.assert_close(got["tp_resumed"][name], want, rtol=1e-7, atol=1e-10, msg=lambda m: f"{name}: {m}")


class _Pushes:
    """A stand-in rank 0 answering each push with the next of ``pushes``."""

    def __init__(self, pushes: list[dict]) -> None:
        self.pushes = pushes

    def weights(self, merged: bool = False) -> dict:
        return self.pushes.pop(0)


def test_a_restarted_replica_gets_the_first_lora_push_under_the_latest(ray_session):
    """Under LoRA only a trainer's first push carries the base model (its own, which a warm start's
    or a resumed run's checkpoint makes differ from the engine's): the keeper a restarted replica
    reloads from holds that push under the latest, so the replica gets bases and latest adapters."""
    from vlrl.rollout.engine.weights_keeper import latest_weights, start_keeper
    from vlrl.train.trainer_group import TrainerGroup

    ray = ray_session
    m = "model.language_model.layers.0.self_attn.q_proj"
    first = {m + ".weight": torch.full((2, 2), 7.0), m + LORA_A: torch.ones(1, 2), m + LORA_B: torch.zeros(2, 1)}
    second = {m + LORA_A: torch.ones(1, 2), m + LORA_B: torch.full((2, 1), 3.0)}
    group = object.__new__(TrainerGroup)  # the real push_weights over a stand-in rank
    group.workers = [ray.remote(_Pushes).options(num_cpus=0).remote([first, second])]
    group._adapters_only = True
    name, keeper = start_keeper()
    try:
        group.push_weights([], 1, [keeper])
        group.push_weights([], 2, [keeper])
        kept, version = latest_weights(name)
        assert version == 2 and set(kept) == set(first)
        assert torch.equal(kept[m + ".weight"], first[m + ".weight"]) and torch.equal(kept[m + LORA_B], second[m + LORA_B])
    finally:
        ray.kill(keeper)
        ray.kill(group.workers[0])
