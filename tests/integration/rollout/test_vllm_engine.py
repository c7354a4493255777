"""The vLLM engine without vLLM: its translations, its config, its actor loop on a stand-in engine,
the recipe that selects it, and the clear failure where vLLM is not installed.

What only vLLM itself can show (its own expansion, logprobs and weight loading against a Hugging
Face forward) is in the vLLM lane (``tests/vllm/``) and ``scripts/vllm/check_vllm_engine.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import importlib.util
import re
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from tests.helpers.chat import model_state, part, perturbed, request, screen, turn_text, user_turn
from vlrl.config import ConfigError, load_recipe, validate
from vlrl.mm import content_hash, patch_rule_of
from vlrl.mm.tile_wire import TileSender
from vlrl.models import build_tiny
from vlrl.rollout.engine import EmbeddedEngine, VLLMEngine
from vlrl.rollout.engine.vllm_engine import MISSING_VLLM, engine_args
from vlrl.rollout.engine.vllm_inputs import (
    BANNED_LOGIT_BIAS,
    PixelCache,
    check_expansion,
    checkpoint_weights,
    generate_result,
    prompt_inputs,
    redraw,
    resolve_images,
    sampled_draws,
    sampling_kwargs,
    score_kwargs,
    score_result,
)
from vlrl.rollout.engine.sampling import nucleus_logprob, nucleus_size
from vlrl.rollout.engine.vllm_worker import WeightLoader
from vlrl.rollout.protocol import CacheMiss, GenerateResult, ImagePart, SamplingParams, ScoreResult

RECIPE = Path(__file__).parents[3] / "examples" / "train_click_vllm.py"


@pytest.fixture(scope="module")
def pad(processor) -> int:
    return processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")


@pytest.fixture(scope="module")
def rule(processor):
    return patch_rule_of(processor)


def expand(ids: list[int], pad: int, counts: list[int]) -> list[int]:
    """What vLLM does to a token prompt: the i-th single pad becomes counts[i] pads."""
    out, images = [], iter(counts)
    for token in ids:
        out.extend([pad] * next(images) if token == pad else [token])
    return out


# -- request -> TokensPrompt


def test_prompt_inputs_collapse_each_image_run_and_keep_image_order(processor, pad, rule):
    big, small = screen(320, 240, 1), screen(200, 150, 2)
    prompt = user_turn(processor, "click OK", [big, small]).astype(np.int64)
    req = request(prompt, (part(big), part(small)))

    inputs = prompt_inputs(req, prompt, [big, small], pad, rule)

    unexpanded = processor.tokenizer(turn_text("click OK", 2))["input_ids"]
    assert inputs["prompt_token_ids"] == unexpanded  # exactly the chat's ids, one pad per image
    images = inputs["multi_modal_data"]["image"]
    assert [np.asarray(image).tolist() for image in images] == [big.tolist(), small.tolist()]
    assert inputs["multi_modal_uuids"] == {"image": [part(big).content_hash, part(small).content_hash]}
    counts = [rule.num_tokens(320, 240), rule.num_tokens(200, 150)]
    assert expand(inputs["prompt_token_ids"], pad, counts) == prompt.tolist()


def test_text_only_prompt_passes_unchanged(processor, pad, rule):
    prompt = user_turn(processor, "type hello", []).astype(np.int64)
    inputs = prompt_inputs(request(prompt), prompt, [], pad, rule)
    assert inputs == {"prompt_token_ids": prompt.tolist()}


def test_prompt_inputs_refuse_runs_that_do_not_match_the_images(processor, pad, rule):
    big, small = screen(320, 240, 3), screen(200, 150, 4)
    prompt = user_turn(processor, "click", [big]).astype(np.int64)
    with pytest.raises(ValueError, match=r"prompt_ids hold 1 run\(s\) of <\|image_pad\|> .* but 2 image\(s\)"):
        prompt_inputs(request(prompt, (part(big), part(small))), prompt, [big, small], pad, rule)
    expected = f"prompt_ids hold {rule.num_tokens(320, 240)} <|image_pad|> tokens for it but its 200x150 pixels make"
    with pytest.raises(ValueError, match=expected.replace("|", r"\|")):
        prompt_inputs(request(prompt, (part(small),)), prompt, [small], pad, rule)


def test_check_expansion_names_the_first_difference(processor):
    prompt = user_turn(processor, "click", []).astype(np.int64)
    req = request(prompt)
    check_expansion(req, prompt, prompt.tolist())
    with pytest.raises(RuntimeError, match=f"expanded the prompt to {len(prompt) + 1} ids .* sent {len(prompt)}; .* position 3"):
        check_expansion(req, prompt, [*prompt[:3].tolist(), 7, *prompt[3:].tolist()])


# -- the pixel cache and exact misses


def test_resolve_images_hits_by_reference_and_misses_exactly():
    a, b, c = screen(64, 48, 5), screen(64, 48, 6), screen(64, 48, 7)
    cache = PixelCache(max_bytes=2 * a.nbytes)
    prompt = np.zeros(4, dtype=np.int64)
    sent = resolve_images(request(prompt, (part(a), part(b))), cache)
    assert sent[0] is a and sent[1] is b
    by_reference = resolve_images(request(prompt, (part(b, send=False), part(a, send=False))), cache)
    assert by_reference[0] is b and by_reference[1] is a
    resolve_images(request(prompt, (part(c),)), cache)  # evicts b, the least recently used
    assert cache.evictions == 1 and len(cache) == 2 and cache.nbytes == 2 * a.nbytes

    req = request(prompt, (part(a, send=False), part(b, send=False), part(b, send=False), part(c, send=False)))
    assert resolve_images(req, cache) == CacheMiss(req.request_id, (part(b).content_hash,))


def test_resolve_images_refuses_pixels_under_another_hash():
    a, b = screen(64, 48, 8), screen(64, 48, 9)
    forged = part(a).__class__(part(b).content_hash, 64, 48, a)
    with pytest.raises(ValueError, match=f"image {part(b).content_hash}: the pixels sent hash to {part(a).content_hash}"):
        resolve_images(request(np.zeros(4, dtype=np.int64), (forged,)), PixelCache(2**20))


# -- sampling parameters and vLLM outputs


def test_sampling_kwargs_ask_for_every_tokens_processed_logprob_and_all_stops():
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=12, stop_token_ids=(9, 3), seed=5)
    kwargs = sampling_kwargs(sampling, frozenset({3, 4}), banned=[7, 8])
    assert kwargs == {
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 12,
        "stop_token_ids": [3, 4, 7, 8, 9],  # a drawn placeholder stops the request, to be drawn again
        "seed": 5,
        "logprobs": -1,
        "flat_logprobs": True,
        "logit_bias": {},
        "detokenize": False,
    }
    greedy = sampling_kwargs(SamplingParams(temperature=0.0), frozenset({3, 4}), banned=[7, 8])
    assert greedy["logit_bias"] == {7: BANNED_LOGIT_BIAS, 8: BANNED_LOGIT_BIAS} and greedy["stop_token_ids"] == [3, 4]
    assert greedy["logprobs"] == -1  # the placeholders' biased mass is given back from the row
    # Rows of every id only where they are needed: RL's default sampling gets the sampled token's alone.
    for plain in (SamplingParams(temperature=1.0), SamplingParams(temperature=0.7, top_p=1.0)):
        assert sampling_kwargs(plain, frozenset({3}), banned=[7, 8])["logprobs"] == 0
    assert sampling_kwargs(SamplingParams(temperature=0.0), frozenset({3}), banned=[])["logprobs"] == 0


def test_a_sampled_token_alone_gives_its_logprob_and_no_nucleus():
    """``logprobs=0`` (temperature != 0, no top-p): each position's row is the sampled token alone."""
    prompt = np.arange(10, 22, dtype=np.int64)
    alone = SimpleNamespace(token_ids=[5, 6], logprobs=[-1.25, -0.5], start_indices=[0, 1], end_indices=[1, 2])
    sampled = request(prompt, sampling=SamplingParams(temperature=0.7, max_tokens=4))
    result = generate_result(sampled, prompt, vllm_output(prompt, [5, 6], alone), version=1, banned=[7, 8])
    np.testing.assert_allclose(result.logprobs, [-1.25, -0.5])
    assert set(result.extras) == {"temperature"} and result.extras["temperature"].tolist() == pytest.approx([0.7, 0.7])
    assert score_kwargs()["prompt_logprobs"] == 0 and score_kwargs()["max_tokens"] == 1


def lp(value: float) -> SimpleNamespace:
    return SimpleNamespace(logprob=value)


def flat(rows: list[tuple[int, np.ndarray]]) -> SimpleNamespace:
    """vLLM's ``FlatLogprobs`` for ``logprobs=-1``: per position, the sampled id first, then every id."""
    token_ids, logprobs, starts, ends = [], [], [], []
    for token, row in rows:
        starts.append(len(token_ids))
        order = np.argsort(-row, kind="stable")
        token_ids += [token, *order.tolist()]
        logprobs += [float(row[token]), *row[order].tolist()]
        ends.append(len(token_ids))
    return SimpleNamespace(token_ids=token_ids, logprobs=logprobs, start_indices=starts, end_indices=ends)


def vllm_row(z: np.ndarray, temperature: float, top_p: float, biased: list[int]) -> np.ndarray:
    """What vLLM's ``processed_logprobs`` mode reports for one draw (its CPU sampler's steps):
    the ``biased`` ids' logit bias, the temperature, top-p by ascending cumulative mass,
    log_softmax over what is kept, -inf elsewhere."""
    logits = torch.as_tensor(z, dtype=torch.float32).clone()
    logits[biased] += BANNED_LOGIT_BIAS
    logits /= temperature or 1.0
    if top_p < 1:
        ascending, order = logits.sort()
        cut = ascending.softmax(-1).cumsum(-1) <= 1 - top_p
        cut[-1] = False
        logits[order[cut]] = float("-inf")
    return logits.log_softmax(-1).double().numpy()


def vllm_output(prompt, token_ids, logprobs, *, finish="stop", cached=0, prompt_logprobs=None) -> SimpleNamespace:
    """The attributes of a vLLM ``RequestOutput`` the translations read."""
    completion = SimpleNamespace(token_ids=token_ids, logprobs=logprobs, finish_reason=finish)
    return SimpleNamespace(
        prompt_token_ids=list(prompt), outputs=[completion], num_cached_tokens=cached, prompt_logprobs=prompt_logprobs
    )


def test_generate_result_takes_each_sampled_tokens_logprob():
    prompt = np.arange(10, 22, dtype=np.int64)
    rows = [(5, np.log(np.full(8, 1 / 8))), (6, np.log(np.arange(1, 9) / 36)), (2, np.log(np.full(8, 1 / 8)))]
    output = vllm_output(prompt, [5, 6, 2], flat(rows), cached=8)
    result = generate_result(request(prompt), prompt, output, version=4)
    assert isinstance(result, GenerateResult) and result.extras == {}  # greedy: no sampled fields
    assert result.token_ids.dtype == np.int32 and result.token_ids.tolist() == [5, 6, 2]
    assert result.logprobs.dtype == np.float32
    np.testing.assert_allclose(result.logprobs, [np.log(1 / 8), np.log(7 / 36), np.log(1 / 8)], rtol=1e-6)
    assert (result.finish_reason, result.policy_version) == ("stop", 4)
    assert (result.prefill_tokens, result.reused_prefix_tokens) == (4, 8)

    at_length = vllm_output(prompt, [5], flat(rows[:1]), finish="length")
    assert generate_result(request(prompt), prompt, at_length, 0).finish_reason == "length"
    with pytest.raises(RuntimeError, match="finished it with 'abort'"):
        generate_result(request(prompt), prompt, vllm_output(prompt, [], flat([]), finish="abort"), 0)
    with pytest.raises(RuntimeError, match="expanded the prompt"):
        generate_result(request(prompt), prompt, vllm_output(prompt[1:], [5], flat(rows[:1])), 0)
    with pytest.raises(RuntimeError, match="position 0 are not those of the sampled token 4"):
        generate_result(request(prompt), prompt, vllm_output(prompt, [4], flat(rows[:1])), 0)


@pytest.mark.parametrize("temperature, top_p", [(0.7, 0.9), (1.3, 0.5), (1.0, 1.0), (0.6, 1.0), (0.0, 1.0)])
def test_sampled_draws_report_what_the_embedded_engine_reports_for_the_same_logits(temperature, top_p):
    """From vLLM's rows of the distributions it drew from: the nucleus count the embedded engine's
    sampler gives, and the logprob ``nucleus_logprob`` gives the trainer for that count, the
    placeholders in the nucleus and normaliser with their own logits (a greedy request's row
    biases them: their mass is given back)."""
    rng = np.random.default_rng(0)
    vocab, banned = 64, [60, 61, 62, 63]
    greedy = temperature == 0
    rows, expected = [], []
    for position in range(12):
        z = rng.normal(0, 2, vocab).astype(np.float32)
        z[banned] += 2  # placeholders among the likely tokens, as in an untrained policy
        row = vllm_row(z, temperature, top_p, banned if greedy else [])
        token = int(rng.choice(np.flatnonzero(np.isfinite(row) & ~np.isin(np.arange(vocab), banned))))
        rows.append((token, row))
        t = torch.as_tensor(z) / (temperature or 1.0)
        kept = nucleus_size(t, top_p) if temperature and top_p < 1 else 0
        expected.append((float(nucleus_logprob(t, token, kept)), kept))
    sampling = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=12)
    ids = [t for t, _ in rows]
    logprobs, nucleus = sampled_draws(request(np.zeros(3, np.int64), sampling=sampling), ids, flat(rows), banned)
    np.testing.assert_allclose(logprobs, [lp for lp, _ in expected], atol=2e-6)
    if top_p < 1:
        assert nucleus == [k for _, k in expected] and 1 < min(nucleus) < vocab
    if greedy:  # vLLM's own logprobs leave the biased placeholders' mass out: measurably off
        assert np.abs(logprobs - [row[t] for t, row in rows]).max() > 1e-2
    prompt = np.zeros(3, np.int64)
    result = generate_result(request(prompt, sampling=sampling), prompt, vllm_output(prompt, ids, flat(rows)), 0, banned=banned)
    assert sorted(result.extras) == sorted(
        ({"temperature"} if temperature not in (0, 1) else set()) | ({"nucleus"} if top_p < 1 else set())
    )
    if top_p < 1:
        assert result.extras["nucleus"].dtype == np.int32 and result.extras["nucleus"].tolist() == nucleus
        assert result.extras["temperature"].tolist() == [np.float32(temperature)] * 12


def test_a_drawn_placeholder_is_drawn_again_from_where_it_stopped_the_reply():
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=6, seed=5)
    prompt = np.array([3, 9, 4], dtype=np.int64)
    row = np.log(np.full(8, 1 / 8))
    result = generate_result(request(prompt, sampling=sampling), prompt, vllm_output(prompt, [2, 1, 7], flat([(2, row), (1, row), (7, row)])), 3)
    again, again_prompt, so_far = redraw(request(prompt, sampling=sampling), prompt, result, banned=[6, 7], attempt=1)
    assert again_prompt.tolist() == [3, 9, 4, 2, 1] and again.prompt_ids.tolist() == again_prompt.tolist()
    assert again.sampling.max_tokens == 4 and again.sampling.seed not in (None, 5) and again.sampling.top_p == 0.9
    assert so_far.token_ids.tolist() == [2, 1] and len(so_far.logprobs) == 2 and len(so_far.extras["nucleus"]) == 2
    unseeded = request(prompt, sampling=dataclasses.replace(sampling, seed=None))
    assert redraw(unseeded, prompt, result, [6, 7], 1)[0].sampling.seed is None
    # replayable: the same attempt of the same seeded request draws with the same seed
    assert redraw(request(prompt, sampling=sampling), prompt, result, [6, 7], 1)[0].sampling.seed == again.sampling.seed
    assert redraw(request(prompt, sampling=sampling), prompt, result, [6, 5], 1) is None  # no placeholder at the end
    greedy = request(prompt, sampling=SamplingParams(temperature=0.0))
    assert redraw(greedy, prompt, result, [6, 7], 1) is None  # greedy requests are biased instead
    with pytest.raises(RuntimeError, match="drew a vision placeholder 17 times"):
        redraw(request(prompt, sampling=sampling), prompt, result, [6, 7], attempt=17)


def test_score_result_reads_prompt_logprobs_with_zero_first():
    prompt = np.array([3, 9, 4, 4], dtype=np.int64)
    entries = [None, {9: lp(-2.0), 1: lp(-0.1)}, {4: lp(-0.5)}, {4: lp(-0.25)}]
    result = score_result(request(prompt), prompt, vllm_output(prompt, [0], [{0: lp(0)}], prompt_logprobs=entries), 2)
    assert isinstance(result, ScoreResult) and result.policy_version == 2
    assert result.logprobs.dtype == np.float32 and result.logprobs.tolist() == [0.0, -2.0, -0.5, -0.25]


# -- weights: names checked, cast, staged, loaded by the worker extension


def test_checkpoint_weights_keep_checkpoint_names_and_cast(tiny_path):
    state = model_state(tiny_path)
    weights = checkpoint_weights({**state, **perturbed(tiny_path)}, torch.bfloat16)
    assert sorted(weights) == sorted(state)
    assert all(w.dtype == torch.bfloat16 and w.is_contiguous() for w in weights.values())
    update = perturbed(tiny_path)["lm_head.weight"]
    torch.testing.assert_close(weights["lm_head.weight"], torch.tensor(update).to(torch.bfloat16))
    assert checkpoint_weights(state, None)["lm_head.weight"].dtype == state["lm_head.weight"].dtype


def test_checkpoint_weights_give_qwen3_vl_moe_s_fused_experts_in_the_checkpoint_layout():
    """vLLM reads the fused experts as released checkpoints store them, ``(experts, in, out)``."""
    from vlrl.models import family

    layer = "model.language_model.layers.0.mlp."
    state = {layer + "experts.gate_up_proj": torch.randn(4, 96, 64), layer + "experts.down_proj": torch.randn(4, 64, 48),
             layer + "gate.weight": torch.randn(4, 64)}  # fmt: skip
    weights = checkpoint_weights(state, None, family("qwen3_vl_moe"))
    for name, value in state.items():
        want = value if name.endswith("gate.weight") else value.transpose(1, 2)
        assert torch.equal(weights[name], want) and weights[name].is_contiguous(), name


def test_checkpoint_weights_refuse_plugin_encoders_and_foreign_names():
    ok = torch.zeros(2)
    with pytest.raises(ValueError, match="plug-in vision encoder, e.g. 'encoder.proj.weight'.*use EmbeddedEngine"):
        checkpoint_weights({"lm_head.weight": ok, "encoder.proj.weight": ok}, None)
    with pytest.raises(ValueError, match=r"1 name\(s\) outside the checkpoint's weights, e.g. \['_orig_mod.lm_head.weight'\]"):
        checkpoint_weights({"_orig_mod.lm_head.weight": ok}, None)


def test_tied_weights_are_staged_apart_and_the_worker_loads_every_tensor(tmp_path):
    embed = torch.randn(6, 4)
    weights = checkpoint_weights({"model.language_model.embed_tokens.weight": embed, "lm_head.weight": embed}, None)
    path = tmp_path / "w.safetensors"
    save_file(weights, str(path))  # refuses tensors sharing storage

    received = {}

    def reload_weights(weights_iterator):  # vLLM's in-place reload (what works on CPU and GPU)
        for name, tensor in weights_iterator:
            received[name] = tensor

    worker = WeightLoader()
    worker.reload_weights = reload_weights
    assert worker.vlrl_load_weights(str(path)) == 2
    assert sorted(received) == sorted(weights)
    torch.testing.assert_close(received["lm_head.weight"], embed)


# -- the config


def test_config_defaults_validate_and_engine_args_are_fixed_where_rl_needs_them():
    config = validate(VLLMEngine.Config())
    args = engine_args(config, model_path="ckpt")
    assert args["model"] == "ckpt" and (args["logprobs_mode"], args["max_logprobs"]) == ("processed_logprobs", -1)
    assert args["generation_config"] == "vllm" and args["distributed_executor_backend"] == "uni"
    module, _, name = args["worker_extension_cls"].rpartition(".")
    assert getattr(importlib.import_module(module), name) is WeightLoader
    tp2 = validate(VLLMEngine.Config(tensor_parallel_size=2, gpus=2))
    assert engine_args(tp2, model_path="ckpt")["distributed_executor_backend"] == "mp"
    cpu = engine_args(validate(VLLMEngine.Config(gpus=0, max_model_len=2048)), model_path="ckpt")
    assert (cpu["enable_chunked_prefill"], cpu["max_num_batched_tokens"]) == (False, 4096)  # whole prompts on CPU
    assert "enable_chunked_prefill" not in args  # a GPU engine keeps vLLM's chunked prefill
    assert config.encoder is None


@pytest.mark.parametrize(
    ("fields", "path", "expected"),
    [
        ({"tensor_parallel_size": 2, "gpus": 1}, "gpus", "2, one per tensor-parallel rank"),
        ({"max_num_seqs": 64, "max_concurrency": 64}, "max_concurrency", "more than max_num_seqs (64)"),
        ({"engine_args": {"seed": 3, "max_num_batched_tokens": 8192}}, "engine_args", "VLLMEngine sets itself (seed)"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization", "<= 1"),
        ({"gpus": -1.0}, "gpus", ">= 0"),
    ],
)
def test_config_errors_name_the_field(fields, path, expected):
    with pytest.raises(ConfigError) as error:
        validate(VLLMEngine.Config(**fields))
    assert error.value.path == path and expected in str(error.value)


# -- without vLLM


def test_starting_the_engine_without_vllm_says_how_to_install_it(monkeypatch, tiny_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, whatever is installed
    with pytest.raises(ImportError, match=r"bash scripts/setup_vllm.sh.*pip install 'vlrl\[vllm\]'"):
        VLLMEngine(VLLMEngine.Config(), str(tiny_path))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed: the actor would start it")
def test_the_actor_fails_to_start_with_the_message(ray_session, tiny_path):
    ray = ray_session
    config = validate(VLLMEngine.Config(cpus=0))
    engine = ray.remote(VLLMEngine).options(num_cpus=0, num_gpus=0).remote(config, str(tiny_path))  # build() wants a GPU
    with pytest.raises(ray.exceptions.RayActorError, match=re.escape(MISSING_VLLM)):
        ray.get(engine.load.remote(), timeout=120)


def test_build_needs_ray(monkeypatch):
    monkeypatch.setattr("ray.is_initialized", lambda: False)
    with pytest.raises(RuntimeError, match="VLLMEngine needs a running Ray"):
        VLLMEngine.Config().build(model_path="ckpt")


def test_a_cpu_engine_refuses_heads_vllms_cpu_attention_cannot_run(tmp_path):
    """Heads of 16 load in vLLM's CPU build and fail at the first request: refused at build, naming the fix."""
    path = build_tiny("qwen2_vl", tmp_path / "tiny16", head_dim=16)
    with pytest.raises(ConfigError, match=r"engine\.gpus.*has heads of 16.*tiny\.head_dim=32"):
        VLLMEngine.Config(gpus=0).build(model_path=str(path))


# -- the actor's loop on a stand-in for vLLM's AsyncLLM


ANSWER = [9, 10]
"""The fake engine's answer: ids that are no placeholder of the tiny builds."""


class FakeAsyncLLM:
    """Expands pads as vLLM does, answers two tokens, can hold requests, records weight loads."""

    def __init__(self, rule) -> None:
        self.rule = rule
        self.hold: asyncio.Event | None = None
        self.loaded: dict[str, torch.Tensor] = {}
        self.resets = 0
        self.request_ids: list[str] = []
        self.lora_requests: list = []
        self.rpcs = 0
        self.adapters: list[tuple[dict, dict[str, torch.Tensor], bool]] = []  # (config, tensors, load_inplace)
        self.args: dict = {}
        self.placeholders = 0  # how many next answers draw a placeholder after their first token
        self.prompts: list[list[int]] = []
        self.params: list = []

    async def generate(self, inputs, params, request_id, lora_request=None):
        self.request_ids.append(request_id)
        self.lora_requests.append(lora_request)
        images = inputs.get("multi_modal_data", {}).get("image", [])
        pad = self.pad
        expanded = expand(inputs["prompt_token_ids"], pad, [self.rule.num_tokens(*image.size) for image in images])
        if self.hold is not None:
            await self.hold.wait()
        prompt_logprobs = None
        if getattr(params, "prompt_logprobs", None) == 0:
            prompt_logprobs = [None, *({t: lp(-float(i))} for i, t in enumerate(expanded[1:], 1))]
        z = np.log(np.arange(1, 17) / 136)  # the model's distribution over 16 ids, the placeholders' among them
        row = vllm_row(z, params.temperature, getattr(params, "top_p", 1.0), sorted(getattr(params, "logit_bias", {})))
        self.prompts.append(list(inputs["prompt_token_ids"]))
        self.params.append(params)
        answer, finish = ANSWER, "length"
        if self.placeholders:
            self.placeholders -= 1
            answer, finish = [ANSWER[0], self.pad], "stop"
            assert self.pad in params.stop_token_ids
        yield vllm_output(expanded, answer, flat([(t, row) for t in answer]), finish=finish, prompt_logprobs=prompt_logprobs)

    async def collective_rpc(self, method, args=()):
        assert method == "vlrl_load_weights"
        self.rpcs += 1
        with safe_open(args[0], framework="pt") as handle:
            self.loaded = {name: handle.get_tensor(name) for name in handle.keys()}
        return [len(self.loaded)]

    async def add_lora(self, lora_request):
        folder = Path(lora_request.lora_path)
        config = json.loads((folder / "adapter_config.json").read_text())
        with safe_open(folder / "adapter_model.safetensors", framework="pt") as handle:
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        self.adapters.append((config, tensors, lora_request.load_inplace))
        return True

    async def reset_prefix_cache(self):
        self.resets += 1
        return True

    async def reset_encoder_cache(self):
        self.resets += 1

    async def reset_mm_cache(self):
        self.resets += 1


@pytest.fixture
def fake_vllm(monkeypatch, rule, pad):
    """Just enough of the ``vllm`` package for ``VLLMEngine.__init__`` and its calls."""
    llm = FakeAsyncLLM(rule)
    llm.pad = pad
    modules = {name: types.ModuleType(name) for name in (
        "vllm", "vllm.sampling_params", "vllm.engine", "vllm.engine.arg_utils", "vllm.v1", "vllm.v1.engine",
        "vllm.v1.engine.async_llm", "vllm.lora", "vllm.lora.request",
    )}  # fmt: skip
    modules["vllm"].SamplingParams = lambda **kwargs: SimpleNamespace(**kwargs)
    modules["vllm.sampling_params"].RequestOutputKind = SimpleNamespace(FINAL_ONLY="final")
    modules["vllm.engine.arg_utils"].AsyncEngineArgs = lambda **kwargs: kwargs
    modules["vllm.v1.engine.async_llm"].AsyncLLM = SimpleNamespace(from_engine_args=lambda args: llm.args.update(args) or llm)
    modules["vllm.lora.request"].LoRARequest = lambda name, id, path, load_inplace=False: SimpleNamespace(
        lora_name=name, lora_int_id=id, lora_path=path, load_inplace=load_inplace
    )
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return llm


def test_actor_serves_misses_scores_and_updates_between_requests(fake_vllm, tiny_path, processor, tmp_path):
    shot = screen(320, 240, 11)
    prompt = user_turn(processor, "click OK", [shot])

    async def main():
        engine = VLLMEngine(VLLMEngine.Config(weights_dir=str(tmp_path)), str(tiny_path))
        miss = await engine.generate(request(prompt, (part(shot, send=False),)))
        first = await engine.generate(request(prompt, (part(shot),), trajectory="t"))

        fake_vllm.hold = asyncio.Event()  # the next request runs until released
        running = asyncio.create_task(engine.generate(request(prompt, (part(shot, send=False),), trajectory="t")))
        await asyncio.sleep(0.01)
        update = asyncio.create_task(engine.update_weights(perturbed(tiny_path), 1))
        await asyncio.sleep(0.01)
        waiting = asyncio.create_task(engine.generate(request(prompt, (part(shot, send=False),))))
        await asyncio.sleep(0.01)
        assert not update.done() and fake_vllm.loaded == {} and await engine.load() == 2
        fake_vllm.hold.set()
        during, _, after = await asyncio.gather(running, update, waiting)

        score = await engine.score(request(prompt, (part(shot, send=False),)))
        with pytest.raises(ValueError, match="version=1; expected more than the latest, 1"):
            await engine.update_weights(perturbed(tiny_path), 1)
        return miss, first, during, after, score, await engine.stats(), await engine.policy_version()

    miss, first, during, after, score, stats, version = asyncio.run(main())
    assert miss == CacheMiss(miss.request_id, (part(shot).content_hash,))
    # the placeholders' bias taken out again: the model's own distribution
    assert first.token_ids.tolist() == ANSWER
    np.testing.assert_allclose(first.logprobs, [np.log(10 / 136), np.log(11 / 136)], rtol=1e-5)
    assert (first.policy_version, during.policy_version, after.policy_version, version) == (0, 0, 1, 1)
    assert sorted(fake_vllm.loaded) == sorted(perturbed(tiny_path))
    assert all(t.dtype == torch.bfloat16 for t in fake_vllm.loaded.values())
    assert fake_vllm.resets == 3 and list(tmp_path.iterdir()) == []  # prefix, encoder, mm caches dropped; staged file removed
    assert isinstance(score, ScoreResult) and score.logprobs[0] == 0 and score.logprobs[2] == -2.0
    assert len(set(fake_vllm.request_ids)) == len(fake_vllm.request_ids)  # vLLM ids never repeat
    assert stats["cache_miss_replies"] == 1 and stats["image_cache_misses"] == 1
    assert stats["image_cache_hits"] == 3 and stats["weight_updates"] == 1 and stats["generated_tokens"] == 6
    assert stats["in_flight"] == 0 and stats["image_bytes_received"] == shot.nbytes


def test_actor_draws_a_placeholder_again_on_the_same_weights_and_joins_the_reply(fake_vllm, tiny_path, processor, tmp_path):
    shot = screen(320, 240, 12)
    prompt = user_turn(processor, "click OK", [shot])
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=8, seed=4)
    fake_vllm.placeholders = 2  # the first two vLLM answers end in <|image_pad|>

    async def main():
        engine = VLLMEngine(VLLMEngine.Config(weights_dir=str(tmp_path)), str(tiny_path))
        result = await engine.generate(request(prompt, (part(shot),), sampling=sampling))
        return result, await engine.stats()

    result, stats = asyncio.run(main())
    first, second, third = fake_vllm.prompts
    assert second == first + [ANSWER[0]] and third == second + [ANSWER[0]]  # each redraw starts after the kept tokens
    assert [p.max_tokens for p in fake_vllm.params] == [8, 7, 6] and len({p.seed for p in fake_vllm.params}) == 3
    assert result.token_ids.tolist() == [ANSWER[0], ANSWER[0], *ANSWER] and result.finish_reason == "length"
    z = torch.log(torch.arange(1, 17) / 136) / 0.7  # the placeholders' own logits in the nucleus and normaliser
    k = nucleus_size(z, 0.9)
    np.testing.assert_allclose(result.logprobs, [float(nucleus_logprob(z, t, k)) for t in result.token_ids], rtol=1e-5)
    assert result.extras["nucleus"].tolist() == [k] * 4 and len(result.extras["temperature"]) == 4
    assert stats["placeholder_redraws"] == 2 and stats["generated_tokens"] == 4


def test_actor_assembles_screens_sent_as_tiles_and_misses_without_their_base(fake_vllm, tiny_path, processor, tmp_path):
    first = screen(320, 240, 11)
    second = first.copy()
    second[100:120, 40:60] = 255  # one region changed, as a GUI step changes it
    prompt = user_turn(processor, "click OK", [first, second])
    sender = TileSender()
    tiled = [ImagePart(content_hash(s), 320, 240, tiles=sender.encode(content_hash(s), s)) for s in (first, second)]

    async def main():
        engine = VLLMEngine(VLLMEngine.Config(weights_dir=str(tmp_path)), str(tiny_path))
        served = await engine.generate(request(prompt, tuple(tiled)))  # the second against the first
        stranger = TileSender()
        stranger.encode(content_hash(first), screen(320, 240, 12))  # a base this engine never saw
        orphan = ImagePart(content_hash(second), 320, 240, tiles=stranger.encode(content_hash(second), second))
        fresh = VLLMEngine(VLLMEngine.Config(weights_dir=str(tmp_path)), str(tiny_path))
        missed = await fresh.generate(request(user_turn(processor, "click OK", [second]), (orphan,)))
        return served, missed, await engine.stats()

    served, missed, stats = asyncio.run(main())
    # The pixels were assembled exactly: the engine's content-hash check of sent pixels passed.
    assert served.token_ids.tolist() == ANSWER and stats["cache_miss_replies"] == 0
    assert stats["image_bytes_received"] == sum(part.nbytes for part in tiled)
    assert tiled[1].nbytes < first.nbytes / 20  # the second screen cost its changed tiles
    assert missed == CacheMiss(missed.request_id, (content_hash(second),))


def test_a_lora_replica_serves_pushed_adapters_as_one_vllm_lora_adapter(fake_vllm, tiny_path, processor, tmp_path):
    """The trainer's first push (the base and the adapters): the base reloaded in place, the
    adapters loaded as vLLM's one LoRA adapter, which every later request carries; a later push of
    adapters alone reloads nothing else; a push without adapters (a full-weight warm start's)
    leaves the base alone serving. A merged-weights replica refuses adapters."""
    shot = screen(320, 240, 13)
    prompt = user_turn(processor, "click OK", [shot])
    base = model_state(tiny_path)
    module = "model.language_model.layers.0.self_attn.q_proj"
    generator = torch.Generator().manual_seed(0)
    a, scaled_b = torch.randn(8, 64, generator=generator), torch.randn(64, 8, generator=generator)
    adapters = {f"{module}.lora_A.weight": a, f"{module}.lora_B.weight": scaled_b}
    config = VLLMEngine.Config(weights_dir=str(tmp_path), dtype="float32", lora_rank=8, lora_tower=True)

    async def main():
        engine = VLLMEngine(config, str(tiny_path))
        before = len(fake_vllm.lora_requests)
        await engine.generate(request(prompt, (part(shot),)))
        await engine.update_weights({**base, **adapters}, 1)
        first = (fake_vllm.rpcs, sorted(fake_vllm.loaded))
        await engine.generate(request(prompt, (part(shot, send=False),)))
        await engine.update_weights({k: 2 * v for k, v in adapters.items()}, 2)
        second_rpcs = fake_vllm.rpcs
        await engine.generate(request(prompt, (part(shot, send=False),)))
        await engine.update_weights(perturbed(tiny_path), 3)
        await engine.generate(request(prompt, (part(shot, send=False),)))
        with pytest.raises(ValueError, match="LoRA adapters of rank 16; this replica's vLLM holds up to 8"):
            await engine.update_weights({f"{module}.lora_A.weight": torch.zeros(16, 64), f"{module}.lora_B.weight": torch.zeros(64, 16)}, 4)
        merged = VLLMEngine(dataclasses.replace(config, lora_adapters="off"), str(tiny_path))
        with pytest.raises(ValueError, match=r"a replica that takes merged weights \(LoRA pushes arrive as merged weights \(lora_adapters='off'\)\)"):
            await merged.update_weights(adapters, 1)
        return first, second_rpcs, fake_vllm.lora_requests[before:], await engine.stats(), await merged.stats()

    (rpcs, loaded), second_rpcs, served, stats, merged_stats = asyncio.run(main())
    assert fake_vllm.args["enable_lora"] and fake_vllm.args["max_lora_rank"] == 8 and fake_vllm.args["max_loras"] == 1
    assert fake_vllm.args["enable_tower_connector_lora"]
    assert rpcs == 1 and loaded == sorted(base)  # the first push's base, reloaded; its adapters are not in the file
    assert second_rpcs == 1  # adapters alone: no reload
    assert [adapter[2] for adapter in fake_vllm.adapters] == [True, True]  # each replaces the one adapter in place
    settings, tensors, _ = fake_vllm.adapters[0]
    assert (settings["r"], settings["lora_alpha"], settings["target_modules"]) == (8, 8, [module])  # scale 1: B is s B
    torch.testing.assert_close(tensors[f"base_model.model.{module}.lora_A.weight"], a)
    torch.testing.assert_close(fake_vllm.adapters[1][1][f"base_model.model.{module}.lora_B.weight"], 2 * scaled_b)
    assert served[0] is None and served[3] is None  # before the first push, and after one without adapters
    assert served[1].lora_int_id == served[2].lora_int_id == 1 and not served[1].load_inplace
    assert list(tmp_path.iterdir()) == []  # staged file and adapter folders removed
    assert (stats["lora_adapters"], stats["weight_updates"], merged_stats["lora_adapters"]) == (1.0, 3, 0.0)


# -- the recipe


def test_vllm_cpu_recipes_swap_only_the_engine_and_the_head_size():
    for variant in ("recipe", "small"):
        base = load_recipe(str(RECIPE.with_name("train_click.py")) + f":{variant}")
        config = load_recipe(f"{RECIPE}:{variant}")
        assert isinstance(config.engine, VLLMEngine.Config) and (config.engine.gpus, config.engine.dtype) == (0, "float32")
        assert config.tiny == dataclasses.replace(base.tiny, head_dim=32)
        assert config.sources == base.sources and config.driver == base.driver and config.steps == base.steps
        assert (config.optim, config.loss, config.warm_start, config.trainer) == (base.optim, base.loss, base.warm_start, base.trainer)
    control = load_recipe(f"{RECIPE}:embedded_head_dim_32")
    assert isinstance(control.engine, EmbeddedEngine.Config) and control.tiny.head_dim == 32


def test_vllm_recipe_swaps_only_the_engine_and_the_trainers_device():
    base = load_recipe(str(RECIPE.with_name("train_click.py")) + ":recipe")
    config = load_recipe(f"{RECIPE}:gpu", ["engine.max_num_seqs=32"])
    assert isinstance(base.engine, EmbeddedEngine.Config) and isinstance(config.engine, VLLMEngine.Config)
    assert (config.engine.gpus, config.engine.max_num_seqs, config.trainer.gpus_per_worker) == (1, 32, 1)
    assert config.sources == base.sources and config.driver == base.driver and config.steps == base.steps
    assert (config.optim, config.loss, config.micro_batches, config.layout) == (base.optim, base.loss, base.micro_batches, base.layout)
    assert dataclasses.replace(config.trainer, gpus_per_worker=0.0) == base.trainer
