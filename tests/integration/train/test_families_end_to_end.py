"""Every model family through the engine and the trainer: the embedded engine's logprobs of a
multimodal multi-turn sequence equal a plain transformers forward of the family; after a trainer
step and a weight push the engine equals the trainer; a checkpoint's ``hf/`` folder loads with
the family's own transformers class and gives the trainer's logprobs. (Qwen2-VL's own runs are
``test_trainer_group``.)

The trainer and the engine run as they do inside their actors, without Ray: every family's step
in one spawned 1-rank world (``vlrl.bench.worlds``), its ``Trainer`` built from the config a
``TrainerGroup`` gives its ranks, and the engine's ``EngineCore`` in this process. The Ray wiring
around them (the group's push through the object store, the engine actor) is the same for every
family, and ``test_trainer_group`` checks it; an actor per family and side cost ~5 CPU s of imports
each."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from transformers import AutoProcessor

from tests.helpers.chat import run_core
from vlrl.bench.trainer_workload import Workload, make_workload, reference_token_logprobs
from vlrl.bench.worlds import World, run_worlds
from vlrl.config import validate
from vlrl.models import build_tiny, family
from vlrl.pack import Layout, MicroBatchPlanner
from vlrl.rollout.protocol import GenerateRequest, ImagePart
from vlrl.train.loss import PolicyLoss
from vlrl.train.optimizer import Optimizer
from vlrl.train.trainer import Trainer

FAMILIES = ["qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5"]


def rank_config() -> Trainer.Config:
    """What the ranks of ``test_trainer_group.build_group``'s group are built from."""
    return validate(Trainer.Config(
        optim=Optimizer.Config(lr=1e-3, schedule="constant"), loss=PolicyLoss.Config(kind="grpo"),
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=160),
    ))  # fmt: skip


def _steps_main(rank: int, world: int, builds: dict[str, tuple[str, Workload]], config: Trainer.Config, folder: str) -> dict:
    """Each family's step metrics and the push after it (``Trainer.push_state``, what a
    ``TrainerGroup`` rank hands ``push_weights``); its checkpoint under ``folder/<family>``."""
    out = {}
    for name, (path, work) in builds.items():
        trainer = config.build(model_path=path, store=work.store(), layout=Layout())
        metrics = trainer.step(work.metas)
        push = trainer.push_state()
        trainer.save(f"{folder}/{name}", {})
        trainer.close()
        out[name] = (metrics, push)
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """Each family's checkpoint, workload, step metrics, push and saved checkpoint folder."""
    tmp = tmp_path_factory.mktemp("families")
    paths = {name: str(build_tiny(name, tmp / name)) for name in FAMILIES}
    builds = {name: (path, make_workload(path)) for name, path in paths.items()}
    ((results,),) = run_worlds(tmp / "world", [World(1, _steps_main, (builds, rank_config(), str(tmp / "ckpt")))])
    return {name: (path, work, *results[name], tmp / "ckpt" / name) for name, (path, work) in builds.items()}


@pytest.mark.parametrize("name", FAMILIES)
def test_engine_and_trainer_agree_with_transformers_before_and_after_a_step(trained, name):
    path, work, metrics, push, ckpt = trained[name]
    meta = work.metas[0]
    row = work.rows[meta.key]
    pixels = [work.images[meta.images[i].store_key] for _, i in meta.image_offsets]
    parts = tuple(
        ImagePart(meta.images[i].content_hash, p.shape[1], p.shape[0], p) for (_, i), p in zip(meta.image_offsets, pixels)
    )
    processor = AutoProcessor.from_pretrained(path)

    async def before_and_after(core) -> tuple[np.ndarray, np.ndarray]:
        def request() -> GenerateRequest:
            return GenerateRequest(f"s-{uuid.uuid4().hex}", f"t-{uuid.uuid4().hex}", row["token_ids"], parts)

        before = np.asarray((await core.score(request())).logprobs)
        await core.update_weights(push, 1)
        assert core.policy_version() == 1
        return before, np.asarray((await core.score(request())).logprobs)

    before, after = run_core(path, before_and_after, cpus=0)
    model = family(name).load(path).eval()
    np.testing.assert_allclose(before[1:], reference_token_logprobs(model, processor, row["token_ids"], pixels)[1:], atol=2e-4)

    assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
    model.load_state_dict(push, strict=True)
    trainer_side = reference_token_logprobs(model, processor, row["token_ids"], pixels)
    assert not np.allclose(before[1:], after[1:], atol=1e-4)  # the step moved the policy
    np.testing.assert_allclose(after[1:], trainer_side[1:], atol=2e-4)

    saved = family(name).model_class.from_pretrained(str(ckpt / "hf")).eval()
    reloaded = reference_token_logprobs(saved, processor, row["token_ids"], pixels)
    np.testing.assert_allclose(reloaded, trainer_side, atol=1e-6)
