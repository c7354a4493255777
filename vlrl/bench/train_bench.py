"""Trainer throughput and peak memory per DP x CP x TP layout, next to the single-process reference.

Workload (``write_workload``; deterministic by seed and written identically into every rank's own
``LocalStore``, from which each rank's packer and encoder read only their share): GUI-agent
trajectories in groups of ``members``. A trajectory runs on one device (desktop 1920x1080,
laptop 1440x900, browser 1280x720, phone 1080x2400, each at 1/8 of the side so the tiny
processor keeps 18-55 image tokens per screenshot) for 2..``max_turns`` turns of::

    observation text, <|vision_start|> + the screenshot's image tokens + <|vision_end|>, response

with the loss mask on the responses. Members of a group share their device and their first
screenshot (the task's start screen, stored once). Rollout logprobs sit near the random model's
``-log V`` so the ratios are near 1; advantages are the group-normalised rewards.

Model (``build_model``): the tiny model's tokenizer and processor (``vlrl.models.build_tiny``) under
a larger randomly initialised Qwen2-VL (``ModelSpec``: hidden 256, 4 layers, 8 heads / 4 KV
heads), so layer compute, not Python overhead, is most of a step.

Per layout, in a fresh world (``vlrl bench train``: spawned gloo processes on CPU, one per rank,
each setting the ``torchrun`` variables and calling ``init_distributed``; under ``torchrun``: in
process, NCCL when there are GPUs): build the ``Trainer``, one warm-up step, ``steps`` timed steps
of the same batch. A fresh world per layout keeps one layout's peak memory out of the next's.

- ``step_s``: median over the timed steps of the slowest rank's ``step_s``;
- ``tokens_per_s``: the step's real tokens (every DP rank's) / ``step_s``;
- ``peak_mem_mb``: max over ranks of the process's peak RSS (``ru_maxrss``, CPU: interpreter,
  torch and store included) or of ``torch.cuda.max_memory_allocated`` (GPU);
- ``added_mem_mb``: max over ranks of that peak's growth from just before the trainer was built
  (model, optimizer state, activations): where sharding shows on CPU;
- ``speedup_vs_single``, ``mem_vs_single``, ``added_mem_vs_single``: the layout's tokens/s, peak
  and added memory over the 1x1x1 reference's;
- ``first_loss``: the warm-up step's loss; every layout computes the same step from the same
  weights, so these agree to rounding (float64 on CPU).

On CPU each rank gets ``cores // world`` threads (at least one), so every layout has the cores the
reference has; a layout with more ranks than cores time-shares them and cannot be faster than one
process, so its ``speedup_vs_single`` measures overhead, not scaling.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from vlrl.bench.spawned_rank import exit_rank

Shape = tuple[int, int, int]
REFERENCE = "1x1x1"
SCREENS: dict[str, tuple[int, int]] = {
    "desktop": (1920, 1080),
    "laptop": (1440, 900),
    "web": (1280, 720),
    "phone": (1080, 2400),
}
"""(width, height) of each device's screen; screenshots are stored at ``1 / SCREEN_SCALE``."""
SCREEN_SCALE = 8


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The benchmarked Qwen2-VL: text stack and vision tower (random weights, seeded)."""

    hidden: int = 256
    intermediate: int = 1024
    layers: int = 4
    heads: int = 8
    kv_heads: int = 4
    vision_depth: int = 2
    vision_embed: int = 64
    vision_heads: int = 4
    seed: int = 0


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """One training step's batch."""

    groups: int
    members: int
    """Trajectories per group (one task, one start screen)."""
    max_turns: int
    """Each trajectory has 2..max_turns turns, one screenshot each."""
    micro_batch_tokens: int
    """``MicroBatchPlanner`` budget: several trajectories per micro-batch."""
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Size:
    layouts: tuple[Shape, ...]
    """(DP, CP, TP) of each measured world; the first is the 1x1x1 reference."""
    steps: int
    """Timed steps per layout, after one warm-up step."""
    workload: WorkloadSpec
    model: ModelSpec = ModelSpec()
    dtype: str = "float64"
    """``Trainer.Config.dtype``. float64 on gloo: FSDP reduces float32/bfloat16 gradients with
    ``PREMUL_SUM``, which gloo lacks (NCCL has it)."""


SIZES = {
    "smoke": Size(
        ((1, 1, 1), (2, 1, 1), (1, 1, 2)),
        steps=1,
        workload=WorkloadSpec(groups=2, members=2, max_turns=2, micro_batch_tokens=512),
        model=ModelSpec(intermediate=256, layers=1),
    ),
    "small": Size(
        ((1, 1, 1), (2, 1, 1), (1, 1, 2)),
        steps=2,
        workload=WorkloadSpec(groups=2, members=3, max_turns=3, micro_batch_tokens=512),
        model=ModelSpec(intermediate=512, layers=2),
    ),
    "full": Size(
        ((1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (1, 2, 2)),
        steps=5,
        workload=WorkloadSpec(groups=4, members=4, max_turns=6, micro_batch_tokens=1024),
    ),
}  # fmt: skip


def layout_name(shape: Shape) -> str:
    return "x".join(map(str, shape))


def parse_layout(name: str) -> Shape:
    try:
        dp, cp, tp = (int(part) for part in name.split("x"))
    except ValueError:
        raise ValueError(f"layout {name!r}; expected DPxCPxTP, e.g. 2x1x1") from None
    return dp, cp, tp


# ---- model and workload ----------------------------------------------------------------------


def build_model(path: str | Path, spec: ModelSpec) -> Path:
    """The tiny model's tokenizer and processor under a Qwen2-VL of ``spec``'s size, at ``path``."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.utils import logging

    from vlrl.models import build_tiny

    logging.disable_progress_bar()
    path = build_tiny("qwen2_vl", path, seed=spec.seed)
    tiny = Qwen2VLConfig.from_pretrained(path)
    text = tiny.text_config
    half = spec.hidden // spec.heads // 2  # M-RoPE sections (t, h, w) sum to head_dim / 2, as Qwen2-VL's 16/24/24
    sections = [half // 4, 3 * half // 8, half - half // 4 - 3 * half // 8]
    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=text.vocab_size, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
            num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
            max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": sections},
            bos_token_id=text.bos_token_id, eos_token_id=text.eos_token_id, pad_token_id=text.pad_token_id,
        ),
        vision_config=dict(
            depth=spec.vision_depth, embed_dim=spec.vision_embed, hidden_size=spec.hidden, num_heads=spec.vision_heads,
            mlp_ratio=2,
        ),
        image_token_id=tiny.image_token_id, video_token_id=tiny.video_token_id,
        vision_start_token_id=tiny.vision_start_token_id, vision_end_token_id=tiny.vision_end_token_id,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(spec.seed)
        model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = text.eos_token_id
    model.generation_config.pad_token_id = text.pad_token_id
    model.save_pretrained(path)
    return path


def write_workload(store: Any, spec: WorkloadSpec, model_path: str | Path) -> list:
    """Write one step's trajectories and screenshots into ``store``; return their ``SeqMeta``s.
    Same ``spec`` and model, same rows, images and metadata."""
    from transformers import AutoProcessor, Qwen2VLConfig

    from vlrl.mm import patch_rule_of, store_image
    from vlrl.records import ADVANTAGES, LOGPROBS, LOSS_MASK, TOKEN_IDS, SeqMeta

    config = Qwen2VLConfig.from_pretrained(model_path)
    rule = patch_rule_of(AutoProcessor.from_pretrained(model_path))
    vocab = config.text_config.vocab_size
    image_id, start_id, end_id = config.image_token_id, config.vision_start_token_id, config.vision_end_token_id
    low = max(image_id, start_id, end_id, config.video_token_id) + 1  # text tokens: no special ids
    rng = np.random.default_rng(spec.seed)
    devices = list(SCREENS)

    def screenshot(device: str, *key: int):
        width, height = (side // SCREEN_SCALE for side in SCREENS[device])
        pixels = np.random.default_rng((spec.seed, *key)).integers(0, 256, (height, width, 3), dtype=np.uint8)
        return store_image(store, pixels, holder="train-bench", rule=rule)

    metas = []
    for g in range(spec.groups):
        device = devices[g % len(devices)]
        first = screenshot(device, g, 0, 0)
        rewards = rng.random(spec.members)
        advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-6)  # GRPO: group-normalised
        for m in range(spec.members):
            turns = int(rng.integers(2, spec.max_turns + 1))
            shots = [first, *(screenshot(device, g, m + 1, t) for t in range(1, turns))]
            ids: list[int] = []
            mask: list[bool] = []
            offsets, contexts = [], []
            for t, shot in enumerate(shots):
                prompt = [*rng.integers(low, vocab, int(rng.integers(8, 24))).tolist(), start_id]
                offsets.append((len(ids) + len(prompt), t))
                prompt += [image_id] * shot.num_tokens + [end_id]
                response = rng.integers(low, vocab, int(rng.integers(12, 40))).tolist()  # thought + tool call
                ids += prompt
                contexts.append(len(ids))
                ids += response
                mask += [False] * len(prompt) + [True] * len(response)
            n = len(ids)
            if n > spec.micro_batch_tokens:
                raise ValueError(
                    f"WorkloadSpec.micro_batch_tokens={spec.micro_batch_tokens}; a trajectory has {n} tokens"
                )
            loss_mask = np.array(mask)
            key = f"bench/train/g{g}m{m}"
            store.put(key, {
                TOKEN_IDS: np.array(ids, np.int32),
                LOGPROBS: np.where(loss_mask, -np.log(vocab) + rng.normal(0, 0.1, n), 0).astype(np.float32),
                LOSS_MASK: loss_mask,
                ADVANTAGES: np.where(loss_mask, advantages[m], 0).astype(np.float32),
            })  # fmt: skip
            metas.append(SeqMeta(
                key=key, group_id=f"g{g}", source=device, sample_index=m, reward=float(rewards[m]),
                success=bool(rewards[m] > 0.5), finish="done", turns=turns, num_tokens=n,
                num_response_tokens=int(loss_mask.sum()), context_lengths=tuple(contexts), policy_version=0,
                images=tuple(shots), image_offsets=tuple(offsets),
            ))  # fmt: skip
    return metas


# ---- one layout, on every rank of its world ------------------------------------------------------


def _peak_mb(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure_layout(
    shape: Shape, model_path: str | Path, workload: WorkloadSpec, steps: int, dtype: str
) -> dict[str, Any]:
    """Build the ``Trainer`` for ``shape`` on this world, one warm-up and ``steps`` timed steps;
    the figures, reduced over ranks (the same on every rank). Collective."""
    import torch
    import torch.distributed as dist

    from vlrl.pack import Layout, MicroBatchPlanner
    from vlrl.store import LocalStore
    from vlrl.train.loss import PolicyLoss
    from vlrl.train.trainer import Trainer

    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    store = LocalStore()
    metas = write_workload(store, workload, model_path)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() / 2**20 if device == "cuda" else _peak_mb(device)
    config = Trainer.Config(
        dtype=dtype, lr=1e-5, loss=PolicyLoss.Config(kind="grpo"),
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=workload.micro_batch_tokens),
    )  # fmt: skip
    trainer = config.build(model_path=str(model_path), store=store, layout=Layout(*shape))
    try:
        warm = trainer.step(metas)
        times = [trainer.step(metas)["step_s"] for _ in range(steps)]
    finally:
        trainer.close()
    peak = _peak_mb(device)
    worst = torch.tensor([*times, peak, peak - before], dtype=torch.float64, device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    worst = worst.tolist()
    step_s = statistics.median(worst[:steps])
    return {
        "step_s": step_s,
        "tokens_per_s": warm["real_tokens"] / step_s,
        "peak_mem_mb": worst[steps],
        "added_mem_mb": worst[steps + 1],
        "first_loss": warm["loss"],
        "real_tokens": int(warm["real_tokens"]),
        "micro_batches": int(warm["micro_batches"]),
        "threads_per_rank": torch.get_num_threads(),
    }


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _rank_main(rank: int, world: int, port: int, shape: Shape, model_path: str, size: Size, out: str) -> None:
    """One spawned rank: the ``torchrun`` variables, ``init_distributed`` (gloo: CUDA hidden), one layout."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""  # ``vlrl bench train`` is the CPU bench; NCCL runs under torchrun
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
    import torch
    import torch.distributed as dist
    from transformers.utils import logging

    from vlrl.train.trainer_group import init_distributed

    torch.set_num_threads(max(1, _cores() // world))
    logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")  # FSDP's own deprecations
    init_distributed(timeout_s=300)
    try:
        figures = measure_layout(shape, model_path, size.workload, size.steps, size.dtype)
        if rank == 0:
            Path(out).write_text(json.dumps(figures))
    finally:
        dist.destroy_process_group()
    exit_rank()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_layouts(size: Size, layouts: tuple[Shape, ...]) -> dict[str, dict[str, Any]]:
    """Each layout in a fresh gloo world of ``dp * cp * tp`` spawned processes on CPU."""
    import torch.multiprocessing as mp

    per_layout = {}
    with tempfile.TemporaryDirectory(prefix="vlrl-train-bench-") as tmp:
        model_path = str(build_model(Path(tmp) / "model", size.model))
        for shape in layouts:
            out = Path(tmp) / f"{layout_name(shape)}.json"
            world = shape[0] * shape[1] * shape[2]
            mp.spawn(_rank_main, args=(world, _free_port(), shape, model_path, size, str(out)), nprocs=world, join=True)
            per_layout[layout_name(shape)] = json.loads(out.read_text())
    return per_layout


# ---- the figures --------------------------------------------------------------------------------


def summarise(per_layout: dict[str, dict[str, Any]], **about: Any) -> dict[str, Any]:
    """Per-figure dicts keyed by layout, with ratios over the 1x1x1 reference when it ran."""
    names = list(per_layout)
    figure = lambda key: {name: per_layout[name][key] for name in names}  # noqa: E731
    result: dict[str, Any] = {"layouts": names}
    for key in ("tokens_per_s", "peak_mem_mb", "step_s", "added_mem_mb", "first_loss"):
        result[key] = figure(key)
    ref = per_layout.get(REFERENCE)
    if ref is not None:
        result["speedup_vs_single"] = {n: per_layout[n]["tokens_per_s"] / ref["tokens_per_s"] for n in names}
        result["mem_vs_single"] = {n: per_layout[n]["peak_mem_mb"] / ref["peak_mem_mb"] for n in names}
        result["added_mem_vs_single"] = {n: per_layout[n]["added_mem_mb"] / max(ref["added_mem_mb"], 1e-9) for n in names}
    for key in ("real_tokens", "micro_batches", "threads_per_rank"):
        result[key] = figure(key)
    return {**result, **about}


def _oversubscription_note(layouts: tuple[Shape, ...], cores: int) -> str | None:
    biggest = max(dp * cp * tp for dp, cp, tp in layouts)
    if biggest <= 1 or cores >= biggest:
        return None
    return (
        f"{cores} cores for up to {biggest} ranks: a layout with more ranks than cores time-shares them and cannot"
        " beat the single process here; its speedup_vs_single measures parallel overhead, not scaling"
    )


def run(size: str) -> dict[str, Any]:
    """``vlrl bench train``: tokens/s and peak memory of each layout of ``size`` (``small``: 1x1x1,
    2x1x1, 1x1x2 and 2 timed steps; ``full``: also 1x2x1 and 1x2x2, 5 steps), gloo on CPU."""
    config = SIZES[size]
    per_layout = spawn_layouts(config, config.layouts)
    note = _oversubscription_note(config.layouts, _cores())
    if note:
        print(f"note: {note}", flush=True)
    return summarise(
        per_layout, backend="gloo", device="cpu", cores=_cores(), steps=config.steps, dtype=config.dtype,
        workload=asdict(config.workload), model=asdict(config.model), **({"note": note} if note else {}),
    )  # fmt: skip


# ---- direct runs: spawned on CPU, or under torchrun (NCCL with GPUs) -----------------------------


def _torchrun(size: Size, layouts: tuple[Shape, ...]) -> dict[str, Any] | None:
    """The layouts whose world is ``WORLD_SIZE``, in this process; the result on rank 0, else None."""
    import torch
    import torch.distributed as dist
    from transformers.utils import logging

    from vlrl.train.trainer_group import init_distributed

    logging.disable_progress_bar()
    init_distributed(timeout_s=300)
    rank, world = dist.get_rank(), dist.get_world_size()
    fitting = tuple(s for s in layouts if s[0] * s[1] * s[2] == world)
    if not fitting:
        raise SystemExit(f"no layout among {[layout_name(s) for s in layouts]} has {world} ranks")
    backend = dist.get_backend()
    tmp = tempfile.mkdtemp(prefix="vlrl-train-bench-") if rank == 0 else None
    path = [str(build_model(Path(tmp) / "model", size.model)) if rank == 0 else None]
    dist.broadcast_object_list(path, src=0)  # one build, every rank loads it (one host)
    per_layout = {}
    try:
        for shape in fitting:
            try:
                per_layout[layout_name(shape)] = measure_layout(shape, path[0], size.workload, size.steps, size.dtype)
            except Exception as error:
                name = f"{type(error).__name__}: {error}"
                print(f"rank {rank}: layout {layout_name(shape)} failed on {backend}: {name}", file=sys.stderr)
                raise
        dist.barrier()
    finally:
        if tmp is not None:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        dist.destroy_process_group()
    if rank:
        return None
    about = dict(backend=backend, device=torch.cuda.get_device_name() if backend == "nccl" else "cpu", world=world)
    if backend == "gloo" and len(fitting) > 1:
        about["note"] = "peak RSS is per process: a layout after the first carries the earlier ones' peak"
    return summarise(per_layout, **about, cores=_cores(), steps=size.steps, dtype=size.dtype)


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One table out of several runs' JSON (e.g. one torchrun per layout and backend): figures keyed
    ``backend:layout``, each run's speedup over its backend's 1x1x1 and NCCL's over gloo's."""
    runs = {
        f"{r['backend']}:{name}": {key: r[key][name] for key in ("tokens_per_s", "peak_mem_mb", "step_s")}
        for r in results for name in r["layouts"]
    }  # fmt: skip
    out: dict[str, Any] = {"runs": list(runs)}
    for key in ("tokens_per_s", "peak_mem_mb", "step_s"):
        out[key] = {label: figures[key] for label, figures in runs.items()}
    out["speedup_vs_single"], out["speedup_vs_gloo"] = {}, {}
    for label, figures in runs.items():
        backend, name = label.split(":")
        if f"{backend}:{REFERENCE}" in runs:
            out["speedup_vs_single"][label] = figures["tokens_per_s"] / runs[f"{backend}:{REFERENCE}"]["tokens_per_s"]
        if backend != "gloo" and f"gloo:{name}" in runs:
            out["speedup_vs_gloo"][label] = figures["tokens_per_s"] / runs[f"gloo:{name}"]["tokens_per_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vlrl.bench.train_bench",
        description="vlrl bench train, directly: spawned gloo ranks on CPU, or under torchrun (NCCL with GPUs)"
        " the layouts whose world is WORLD_SIZE.",
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--layouts", help="comma-separated DPxCPxTP (default: the size's)")
    parser.add_argument("--steps", type=int, help="timed steps per layout (default: the size's)")
    parser.add_argument("--dtype", choices=["float32", "float64", "bfloat16"], help="trainer dtype (default float64)")
    parser.add_argument("--json", action="store_true", help="end the output with one line of JSON")
    parser.add_argument("--merge", nargs="+", metavar="FILE", help="combine earlier runs' JSON lines and exit")
    args = parser.parse_args(argv)
    from vlrl.bench.runner import print_figures

    if args.merge:
        result = merge([json.loads(Path(f).read_text().strip().splitlines()[-1]) for f in args.merge])
    else:
        size = SIZES[args.size]
        layouts = tuple(parse_layout(n) for n in args.layouts.split(",")) if args.layouts else size.layouts
        size = replace(size, layouts=layouts, steps=args.steps or size.steps, dtype=args.dtype or size.dtype)
        if "WORLD_SIZE" in os.environ:
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            result = _torchrun(size, layouts)
            if result is None:
                return 0
        else:
            note = _oversubscription_note(layouts, _cores())
            result = summarise(spawn_layouts(size, layouts), backend="gloo", device="cpu", cores=_cores(), steps=size.steps,
                               dtype=size.dtype, **({"note": note} if note else {}))  # fmt: skip
    print_figures(result)
    if args.json:
        sys.stdout.flush()
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
