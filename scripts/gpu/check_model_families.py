"""The three model families at real size on GPUs: the trainer on NCCL layouts, and ``VLLMEngine``.

    python scripts/gpu/check_model_families.py --dry-run          # any machine: counts, memory, the plan
    python scripts/gpu/check_model_families.py --families qwen2_5_vl-3b --layouts 1x1x1 --peak-tflops 989
    python scripts/gpu/check_model_families.py --skip-vllm --json # trainer figures only, one JSON line at the end

Models (``MODELS``): Qwen2.5-VL-3B and -7B and a Qwen3-VL-8B-like config, as published, with random
weights: nothing is downloaded. Each is built on the GPU, saved in bf16 with the tokenizer and
processor of ``vlrl.models.build_tiny``'s build of the same family (its placeholder ids; the
model keeps the config's vocabulary, so text ids span the real 151k rows), then:

(a) **trainer**: for each DPxCPxTP layout of ``--layouts`` that fits the GPUs here, a fresh NCCL world
    (``mp.spawn``, one process per GPU, ``torchrun``'s variables, ``init_distributed``) builds the
    project's ``Trainer`` and runs one warm-up and ``--steps`` timed GRPO steps on multi-turn
    trajectories with ``--screen`` screenshots (groups of 4 share their first one), about
    ``--tokens-per-rank`` tokens per GPU (micro-batches of at most ``--tokens-per-rank`` x CP x TP
    tokens, each cut over its DP rank's CP x TP GPUs). Per layout:

    - ``tokens_per_s``: the step's tokens (every DP rank's, image tokens included) / median step time;
    - ``mfu``: model FLOPs / step time / (GPUs x ``--peak-tflops``). Model FLOPs of a step:
      ``6 * N * tokens`` for the LLM (``N``: its matmul parameters, decoder layers and LM head, the
      input embedding lookup left out; attention scores left out) plus ``3 *`` the tower's forward
      FLOPs (``ViTCost``, the encoder plug-in's own ``cost``) over the step's distinct screenshots
      (each is encoded once per step);
    - ``peak_mem_gib``: max over ranks of ``torch.cuda.max_memory_allocated``; ``state_gib`` the
      memory held after the warm-up step (weights and AdamW moments; gradients are freed by
      ``zero_grad``).

(b) **vLLM** (unless ``--skip-vllm``): one ``VLLMEngine`` replica serves the checkpoint; as
    ``scripts/vllm/check_vllm_engine.py`` does for a tiny build (its helpers are reused): vLLM
    rebuilt the prompt ids, generate and score logprobs match an fp32 Hugging Face forward
    (``--tol``), a cache miss for an image never sent, and ``update_weights`` (LM head and the
    tower's merger perturbed) reaches the engine under a new policy version. Each line PASS or FAIL; exit code 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vllm"))  # check_vllm_engine's helpers, for (b)

GIB = 2**30
DTYPE_BYTES = {"bfloat16": 2, "float32": 4}
MEMORY_WORLDS = (1, 2, 4, 8, 16, 32)
DEFAULT_LAYOUTS = "1x1x1,2x1x1,1x1x2,8x1x1,4x1x2,2x2x2,1x2x4"


@dataclass(frozen=True, slots=True)
class ModelSize:
    """One published config: the family's ``text_config`` and ``vision_config`` fields."""

    family: str
    text: dict[str, Any]
    vision: dict[str, Any]
    tie_word_embeddings: bool = False
    tokens: dict[str, int] = field(
        default_factory=lambda: {"image_token_id": 151655, "video_token_id": 151656,
                                 "vision_start_token_id": 151652, "vision_end_token_id": 151653}
    )
    """Placeholder ids of the published tokenizer (the GPU run takes the tiny build's instead)."""


_QWEN25_TEXT = dict(rms_norm_eps=1e-6, max_position_embeddings=128000,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]})  # fmt: skip
_QWEN25_VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, patch_size=14,
                      spatial_merge_size=2, temporal_patch_size=2, window_size=112, hidden_act="silu",
                      fullatt_block_indexes=[7, 15, 23, 31])  # fmt: skip

MODELS = {
    "qwen2_5_vl-3b": ModelSize(
        "qwen2_5_vl",
        dict(_QWEN25_TEXT, hidden_size=2048, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
             intermediate_size=11008, vocab_size=151936),
        dict(_QWEN25_VISION, out_hidden_size=2048),
        tie_word_embeddings=True,
    ),
    "qwen2_5_vl-7b": ModelSize(
        "qwen2_5_vl",
        dict(_QWEN25_TEXT, hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
             intermediate_size=18944, vocab_size=152064),
        dict(_QWEN25_VISION, out_hidden_size=3584),
    ),
    "qwen3_vl-8b": ModelSize(
        "qwen3_vl",
        dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
             intermediate_size=12288, vocab_size=151936, rms_norm_eps=1e-6, max_position_embeddings=262144,
             rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                              "mrope_interleaved": True}),
        dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, out_hidden_size=4096, patch_size=16,
             spatial_merge_size=2, temporal_patch_size=2, deepstack_visual_indexes=[8, 16, 24],
             num_position_embeddings=2304, hidden_act="gelu_pytorch_tanh"),
    ),
}  # fmt: skip
"""Qwen2.5-VL-3B/-7B as published; Qwen3-VL-8B-like (Qwen3-VL-8B-Instruct's sizes, untied)."""


def config_of(size: ModelSize, tokens: dict[str, int] | None = None) -> Any:
    """The family's transformers config at ``size`` (``tokens``: other placeholder ids)."""
    from vlrl.models import family

    config_class = family(size.family).model_class.config_class
    return config_class(
        text_config=dict(size.text), vision_config=dict(size.vision), tie_word_embeddings=size.tie_word_embeddings,
        **(tokens or size.tokens),
    )  # fmt: skip


def image_processor(config: Any, width: int, height: int) -> Any:
    """The family's image processor with room for a ``width`` x ``height`` screenshot unresized."""
    from transformers import Qwen2VLImageProcessor

    vision = config.vision_config
    low, high = pixel_bounds(config, width, height)
    mean_std = dict(image_mean=[0.5] * 3, image_std=[0.5] * 3) if config.model_type == "qwen3_vl" else {}
    return Qwen2VLImageProcessor(
        patch_size=vision.patch_size, merge_size=vision.spatial_merge_size, temporal_patch_size=vision.temporal_patch_size,
        min_pixels=low, max_pixels=high, **mean_std,
    )  # fmt: skip


def pixel_bounds(config: Any, width: int, height: int) -> tuple[int, int]:
    """``(min_pixels, max_pixels)``: 2x2 merged patches at least, the screenshot rounded up to whole ones at most."""
    side = config.vision_config.patch_size * config.vision_config.spatial_merge_size
    return side * side * 4, (-(-width // side) * side) * (-(-height // side) * side)


# ---- counting on the meta device ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Counts:
    total: int
    """Distinct parameters (a tied LM head counts once)."""
    tower: int
    """The vision tower's, mergers included: replicated on every rank (not FSDP-sharded)."""
    backbone: int
    """The LLM's (embeddings, layers, norm, LM head): sharded by FSDP and TP."""
    matmul: int
    """The LLM's matmul parameters per token: backbone without the input embedding lookup, with the
    LM head (once more when tied)."""
    tower_flops: float
    """The tower's forward FLOPs for one screenshot (``ViTCost``)."""
    image_tokens: int
    """Tokens of one screenshot."""


def count(size: ModelSize, width: int, height: int) -> Counts:
    """Parameters of ``size`` built on the meta device (no memory), and its tower's cost per screenshot."""
    from vlrl.models import family

    found = family(size.family)
    config = config_of(size)
    with torch.device("meta"):
        model = found.model_class(config)
    unique = lambda module: sum(p.numel() for p in module.parameters())
    tower = found.tower(model)
    lm = found.language_model(model)
    encoder = found.tower_encoder(model, SimpleNamespace(image_processor=image_processor(config, width, height)))
    grid = encoder.config.patch_rule.grid(width, height)
    total = unique(model)
    return Counts(
        total=total,
        tower=unique(tower),
        backbone=total - unique(tower),
        matmul=unique(lm) - lm.embed_tokens.weight.numel() + model.lm_head.weight.numel(),
        tower_flops=encoder.cost_model(grid),
        image_tokens=grid[0] * grid[1] * grid[2] // encoder.config.patch_rule.merge_size**2,
    )


def state_gib(counts: Counts, dtype: str, gpus: int) -> float:
    """Trainer state per GPU: weights + gradients + AdamW's two moments, all in the trainer's dtype;
    the backbone sharded over all ``gpus`` (FSDP over DP x CP, TP within), the tower replicated."""
    return 4 * DTYPE_BYTES[dtype] * (counts.backbone / gpus + counts.tower) / GIB


def print_plan(counts: dict[str, Counts], layouts: list[tuple[int, int, int]], args: argparse.Namespace) -> None:
    print(f"screenshot {args.screen[0]}x{args.screen[1]}; state = 4 x dtype bytes x (backbone / GPUs + tower),"
          " arithmetic from the counts (activations and FSDP's gathered layers excluded)")  # fmt: skip
    for name, c in counts.items():
        size = MODELS[name]
        heads = (size.text["num_attention_heads"], size.text["num_key_value_heads"])
        print(f"\n{name} ({size.family}): total {c.total:,} = LLM {c.backbone:,} + tower {c.tower:,};"
              f" 6N FLOPs/token with N = {c.matmul:,}; screenshot: {c.image_tokens} tokens,"
              f" tower forward {c.tower_flops / 1e12:.2f} TFLOP")  # fmt: skip
        print("  GPUs  " + "  ".join(f"{n:>6}" for n in MEMORY_WORLDS))
        for dtype in DTYPE_BYTES:
            print(f"  {dtype:<8}" + "".join(f"{state_gib(c, dtype, n):8.1f}" for n in MEMORY_WORLDS) + "  GiB/GPU")
        fits = [layout_name(s) for s in layouts if all(h % s[2] == 0 for h in heads)]
        print(f"  layouts: {', '.join(fits) or 'none'} (TP must divide {heads[0]} heads and {heads[1]} KV heads)")


def layout_name(shape: tuple[int, int, int]) -> str:
    return "x".join(map(str, shape))


def parse_layout(name: str) -> tuple[int, int, int]:
    try:
        dp, cp, tp = (int(part) for part in name.split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"layout {name!r}; expected DPxCPxTP, e.g. 2x1x1") from None
    return dp, cp, tp


# ---- (a) the trainer --------------------------------------------------------------------------------


def build_checkpoint(size: ModelSize, folder: Path, width: int, height: int, seed: int = 0) -> Path:
    """A random-weight checkpoint of ``size`` at ``folder / 'model'`` (bf16), with the tiny build's
    tokenizer and processor (screens up to ``width`` x ``height`` kept unresized)."""
    from transformers import AutoConfig, AutoProcessor

    from vlrl.models import build_tiny, family

    found = family(size.family)
    low, high = pixel_bounds(config_of(size), width, height)
    tiny = build_tiny(size.family, folder / "tiny", min_pixels=low, max_pixels=high)
    tiny_config = AutoConfig.from_pretrained(tiny)
    tokens = {name: getattr(tiny_config, name) for name in size.tokens}
    config = config_of(size, tokens)
    with torch.random.fork_rng(devices=[torch.cuda.current_device()]), torch.device("cuda"):
        torch.manual_seed(seed)
        model = found.model_class(config).to(torch.bfloat16)
    text = tiny_config.get_text_config()
    model.generation_config.eos_token_id = text.eos_token_id
    model.generation_config.pad_token_id = text.pad_token_id
    path = folder / "model"
    model.save_pretrained(path)
    AutoProcessor.from_pretrained(tiny).save_pretrained(path)
    del model
    torch.cuda.empty_cache()
    return path


def write_workload(store: Any, model_path: str, total_tokens: int, max_tokens: int, width: int, height: int,
                   seed: int = 0) -> list:  # fmt: skip
    """GUI-agent trajectories of about ``total_tokens`` tokens in all, each at most ``max_tokens``:
    turns of ``text, <|vision_start|> + screenshot + <|vision_end|>, response`` (loss on responses),
    groups of 4 sharing their first screenshot. The same arguments give the same rows on every rank."""
    import numpy as np
    from transformers import AutoConfig, AutoProcessor

    from vlrl.mm import patch_rule_of, store_image
    from vlrl.records import ADVANTAGES, LOGPROBS, LOSS_MASK, TOKEN_IDS, SeqMeta

    config = AutoConfig.from_pretrained(model_path)
    rule = patch_rule_of(AutoProcessor.from_pretrained(model_path))
    vocab = config.get_text_config().vocab_size
    image_id, start_id, end_id = config.image_token_id, config.vision_start_token_id, config.vision_end_token_id
    low = max(image_id, start_id, end_id, config.video_token_id) + 1
    per_turn = rule.num_tokens(width, height) + 2 + 40 + 60  # image, its two markers, observation, response
    turns = min(4, max_tokens // per_turn)
    if turns < 1:
        raise SystemExit(f"--tokens-per-rank: a micro-batch of {max_tokens} tokens holds no {per_turn}-token turn")
    rng = np.random.default_rng(seed)
    metas, total, g = [], 0, 0

    def screenshot(*key: int):
        pixels = np.random.default_rng((seed, *key)).integers(0, 256, (height, width, 3), dtype=np.uint8)
        return store_image(store, pixels, holder="gpu-check", rule=rule)

    while total < total_tokens:
        first = screenshot(g, 0, 0)
        rewards = rng.random(4)
        advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        for m in range(4):
            if total >= total_tokens:
                break
            shots = [first, *(screenshot(g, m + 1, t) for t in range(1, turns))]
            ids, mask, offsets, contexts = [], [], [], []
            for t, shot in enumerate(shots):
                prompt = [*rng.integers(low, vocab, 40).tolist(), start_id]
                offsets.append((len(ids) + len(prompt), t))
                prompt += [image_id] * shot.num_tokens + [end_id]
                ids += prompt
                contexts.append(len(ids))
                ids += rng.integers(low, vocab, 60).tolist()
                mask += [False] * len(prompt) + [True] * 60
            loss_mask, n = np.array(mask), len(ids)
            key = f"check/g{g}m{m}"
            store.put(key, {
                TOKEN_IDS: np.array(ids, np.int32),
                LOGPROBS: np.where(loss_mask, -np.log(vocab) + rng.normal(0, 0.1, n), 0).astype(np.float32),
                LOSS_MASK: loss_mask,
                ADVANTAGES: np.where(loss_mask, advantages[m], 0).astype(np.float32),
            })  # fmt: skip
            metas.append(SeqMeta(
                key=key, group_id=f"g{g}", source="check", sample_index=m, reward=float(rewards[m]),
                success=bool(rewards[m] > 0.5), finish="done", turns=turns, num_tokens=n,
                num_response_tokens=int(loss_mask.sum()), context_lengths=tuple(contexts), policy_version=0,
                images=tuple(shots), image_offsets=tuple(offsets),
            ))  # fmt: skip
            total += n
        g += 1
    return metas


def measure(shape: tuple[int, int, int], model_path: str, args: argparse.Namespace, matmul: int) -> dict[str, Any]:
    """Warm-up + ``args.steps`` timed trainer steps on this world; figures reduced over ranks. Collective."""
    import torch.distributed as dist

    from vlrl.pack import Layout, MicroBatchPlanner
    from vlrl.store import LocalStore
    from vlrl.train.loss import PolicyLoss
    from vlrl.train.optimizer import Optimizer
    from vlrl.train.trainer import Trainer

    world = shape[0] * shape[1] * shape[2]
    budget = args.tokens_per_rank * shape[1] * shape[2]  # one DP rank's micro-batch, cut over its CP x TP ranks
    store = LocalStore()
    metas = write_workload(store, model_path, args.tokens_per_rank * world, budget, *args.screen)
    torch.cuda.reset_peak_memory_stats()
    config = Trainer.Config(
        dtype=args.dtype, optim=Optimizer.Config(lr=1e-6), loss=PolicyLoss.Config(kind="grpo"),
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=budget),
    )  # fmt: skip
    trainer = config.build(model_path=model_path, store=store, layout=Layout(*shape))
    try:
        warm = trainer.step(metas)
        held = torch.cuda.memory_allocated()
        times = [trainer.step(metas)["step_s"] for _ in range(args.steps)]
        distinct = {item.store_key: item for meta in metas for item in meta.images}
        tower_flops = 3 * sum(trainer.model.encoder.cost(item) for item in distinct.values())  # fwd + bwd
    finally:
        trainer.close()
    worst = torch.tensor([*times, torch.cuda.max_memory_allocated(), held], dtype=torch.float64, device="cuda")
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    step_s = statistics.median(worst[: args.steps].tolist())
    flops = 6 * matmul * warm["real_tokens"] + tower_flops
    return {
        "tokens_per_s": warm["real_tokens"] / step_s,
        "mfu": flops / step_s / (world * args.peak_tflops * 1e12),
        "peak_mem_gib": worst[args.steps].item() / GIB,
        "state_gib": worst[args.steps + 1].item() / GIB,
        "step_s": step_s,
        "real_tokens": int(warm["real_tokens"]),
        "micro_batches": int(warm["micro_batches"]),
        "images": len(distinct),
        "first_loss": warm["loss"],
    }


def _rank_main(rank: int, world: int, port: int, shape, model_path: str, args, matmul: int, out: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
    import torch.distributed as dist

    from vlrl.train.trainer_group import init_distributed

    init_distributed(timeout_s=900)  # cpu:gloo,cuda:nccl
    try:
        figures = measure(shape, model_path, args, matmul)
        if rank == 0:
            Path(out).write_text(json.dumps(figures))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_layouts(name: str, model_path: Path, layouts, args, counts: Counts, results: dict) -> None:
    import torch.multiprocessing as mp

    heads = (MODELS[name].text["num_attention_heads"], MODELS[name].text["num_key_value_heads"])
    for shape in layouts:
        label = f"{name} {layout_name(shape)}"
        world = shape[0] * shape[1] * shape[2]
        if world > torch.cuda.device_count() or any(h % shape[2] for h in heads):
            print(f"SKIP {label}: needs {world} GPU(s) ({torch.cuda.device_count()} here) and TP dividing {heads}")
            continue
        out = model_path.parent / f"{layout_name(shape)}.json"
        try:
            mp.spawn(_rank_main, args=(world, _free_port(), shape, str(model_path), args, counts.matmul, str(out)),
                     nprocs=world, join=True)  # fmt: skip
        except Exception as error:  # noqa: BLE001  one layout failing (e.g. out of memory) does not stop the others
            report_fail(f"train {label}: {type(error).__name__}: {str(error)[-400:]}")
            continue
        figures = json.loads(out.read_text())
        results.setdefault(name, {})[layout_name(shape)] = figures
        print(f"PASS train {label}: {figures['tokens_per_s']:,.0f} tok/s, MFU {figures['mfu']:.1%}, peak"
              f" {figures['peak_mem_gib']:.1f} GiB/rank (state {figures['state_gib']:.1f};"
              f" arithmetic {state_gib(counts, args.dtype, world):.1f}), {figures['real_tokens']} tokens,"
              f" {figures['images']} screenshots, loss {figures['first_loss']:.4f}", flush=True)  # fmt: skip


failures: list[str] = []


def report_fail(what: str) -> None:
    print(f"FAIL {what}", flush=True)
    failures.append(what)


# ---- (b) vLLM -------------------------------------------------------------------------------------


def check_vllm(name: str, model_path: Path, args: argparse.Namespace) -> None:
    """``check_vllm_engine.check`` for any family: the family's own class, its merger's name, and
    the update checked by scoring the first answer again (no second fp32 model on the GPU)."""
    import check_vllm_engine as base
    import numpy as np
    import ray
    from transformers import AutoProcessor

    from vlrl.models import family_of
    from vlrl.rollout.engine import VLLMEngine
    from vlrl.rollout.protocol import (
        GenerateRequest,
        GenerateResult,
        SamplingParams,
        ScoreResult,
    )

    base.failures.clear()
    processor = AutoProcessor.from_pretrained(model_path)
    model = family_of(model_path).load(model_path, dtype=torch.float32).cuda().eval()
    engine = VLLMEngine.Config(
        dtype="bfloat16", gpu_memory_utilization=args.gpu_memory_utilization, max_model_len=8192, max_num_seqs=8,
        max_images_per_prompt=1, enforce_eager=True, cpus=0, weights_dir=args.weights_dir or str(model_path.parent),
    ).build(model_path=str(model_path))  # fmt: skip
    shot, never = base.screen(*args.screen, seed=0), base.screen(*args.screen, seed=1)
    prompt = base.prompt_ids(processor, "Click the OK button.", shot)
    greedy = SamplingParams(temperature=0.0, max_tokens=8)
    try:
        first = ray.get(engine.generate.remote(GenerateRequest("g0", "t", prompt, (base.part(shot),), greedy)))
        base.report(isinstance(first, GenerateResult) and len(first.token_ids) > 0, f"{name} generate: {first!r:.120}")
        if not isinstance(first, GenerateResult):
            return
        full = np.concatenate([prompt, first.token_ids])
        before = base.hf_logprobs(model, processor, full, shot)
        base.close(f"{name} generate", first.logprobs, before[len(prompt) - 1 :], args.tol)
        scored = ray.get(engine.score.remote(GenerateRequest("s0", "t", full, (base.part(shot, send=False),))))
        base.report(isinstance(scored, ScoreResult), f"{name} score answered {type(scored).__name__}")
        if isinstance(scored, ScoreResult):
            base.close(f"{name} score", scored.logprobs[1:], before, args.tol)
        miss = ray.get(engine.generate.remote(GenerateRequest("m0", "t", prompt, (base.part(never, send=False),), greedy)))
        base.report(getattr(miss, "missing", None) == (base.content_hash(never),), f"{name} unknown image: {miss!r:.120}")

        state = {key: value.detach().to("cpu", torch.bfloat16, copy=True) for key, value in model.state_dict().items()}
        merger = next(k for k in state if k.startswith("model.visual.merger.") and k.endswith("weight") and state[k].ndim == 2)
        generator = torch.Generator().manual_seed(0)
        for key in ("lm_head.weight", merger):
            state[key] = state[key] + args.perturb * torch.randn(state[key].shape, generator=generator).to(torch.bfloat16)
        if model.config.tie_word_embeddings:  # vLLM loads the embedding and ties the head to it: move both alike
            state["model.language_model.embed_tokens.weight"] = state["lm_head.weight"]
        ray.get(engine.update_weights.remote(state, 1))
        model.load_state_dict({key: value.float() for key, value in state.items()})
        again = ray.get(engine.score.remote(GenerateRequest("s1", "t", full, (base.part(shot, send=False),))))
        base.report(isinstance(again, ScoreResult) and again.policy_version == 1, f"{name} after update: {again!r:.120}")
        if isinstance(again, ScoreResult):
            base.close(f"{name} score after update_weights", again.logprobs[1:], base.hf_logprobs(model, processor, full, shot), args.tol)
            moved = float(np.abs(again.logprobs[1:] - before.numpy()).max())
            base.report(moved > 10 * args.tol, f"{name}: the update moved logprobs by {moved:.4f} (> {10 * args.tol})")
    finally:
        ray.kill(engine)
        del model
        torch.cuda.empty_cache()
        failures.extend(base.failures)


# ---- main -----------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)} (default: all)")
    parser.add_argument("--layouts", default=DEFAULT_LAYOUTS, help="comma-separated DPxCPxTP; those that need more"
                        " GPUs than present, or whose TP does not divide the heads, are skipped (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=3, help="timed trainer steps per layout, after one warm-up")
    parser.add_argument("--tokens-per-rank", type=int, default=8192, help="tokens of a step per GPU (default: %(default)s)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's dense bf16 peak, TFLOP/s, for MFU"
                        " (default: %(default)s, H100/H200 SXM)")
    parser.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default="bfloat16", help="Trainer.Config.dtype")
    parser.add_argument("--screen", type=lambda s: tuple(int(x) for x in s.split("x")), default=(1280, 720),
                        metavar="WxH", help="screenshot size (default: 1280x720)")
    parser.add_argument("--skip-vllm", action="store_true", help="run the trainer part only")
    parser.add_argument("--tol", type=float, default=0.05, help="logprob tolerance of vLLM vs fp32 HF")
    parser.add_argument("--perturb", type=float, default=0.05, help="scale of the weight perturbation")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.4)
    parser.add_argument("--weights-dir", help="where vLLM's weight updates are staged (default: the work folder)")
    parser.add_argument("--work-dir", help="where the checkpoints are written, one at a time (default: a temp folder)")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: count on the meta device and print the plan")
    parser.add_argument("--json", action="store_true", help="end the output with one line of JSON")
    args = parser.parse_args()
    names = args.families.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"--families: {unknown}; expected some of {list(MODELS)}")
    layouts = [parse_layout(n) for n in args.layouts.split(",")]
    counts = {name: count(MODELS[name], *args.screen) for name in names}
    result: dict[str, Any] = {"counts": {n: asdict(c) for n, c in counts.items()},
                              "state_gib": {n: {d: {w: state_gib(c, d, w) for w in MEMORY_WORLDS} for d in DTYPE_BYTES}
                                            for n, c in counts.items()}}  # fmt: skip
    print_plan(counts, layouts, args)
    if not args.dry_run:
        if not torch.cuda.is_available():
            parser.error("no GPU here: run with --dry-run, or on a GPU machine")
        import ray

        result.update(device=torch.cuda.get_device_name(), gpus=torch.cuda.device_count(), train={})
        for name in names:
            with tempfile.TemporaryDirectory(prefix=f"vlrl-{name}-", dir=args.work_dir) as folder:
                print(f"\n== {name}: building the checkpoint", flush=True)
                path = build_checkpoint(MODELS[name], Path(folder), *args.screen)
                train_layouts(name, path, layouts, args, counts[name], result["train"])
                if not args.skip_vllm:
                    ray.init(num_gpus=1, include_dashboard=False, ignore_reinit_error=True)
                    try:
                        check_vllm(name, path, args)
                    except Exception as error:  # noqa: BLE001  reported; the next family still runs
                        report_fail(f"vllm {name}: {type(error).__name__}: {error}")
                    finally:
                        ray.shutdown()
        result["failures"] = failures
        print("all checks hold" if not failures else f"{len(failures)} check(s) failed")
    if args.json:
        print(json.dumps(result))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
