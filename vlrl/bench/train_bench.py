"""Trainer throughput and memory per DP x CP x TP layout, next to the single-process reference.

The batch and the model are ``vlrl.bench.train_workload``'s: packed multi-turn GUI trajectories
of ``min_tokens``..``max_tokens`` (``small``: 2k-8k, ``full``: 2k-16k) with their screenshot history, under
a random Qwen2-VL with the tiny model's tokenizer. Every rank writes the same batch into its own
``LocalStore``, from which its packer and encoder read only their share.

Per layout, in a fresh world (``vlrl bench train``: spawned gloo processes on CPU, one per rank,
each setting the ``torchrun`` variables and calling ``init_distributed``; under ``torchrun``: in
process, NCCL when there are GPUs), each rank:

1. writes the batch, then builds the ``Trainer`` (RSS before: ``added_mem_mb``'s start);
2. reads its RSS/PSS (``proc_memory.memory_mb``): the **baseline**, interpreter, torch, store and
   model included, just before the first step;
3. runs the **memory probes**: forward and backward of the shortest, then the longest sequence
   alone, gradients dropped unapplied (the weights stay the starting ones), each with the peak
   RSS restarted (``peak_memory``): how the step's memory grows with sequence length;
4. one **warm-up** step of the batch (untimed; PSS sampled meanwhile), then ``steps`` timed steps
   of the same batch, the kernel's peak RSS spanning all of them.

Figures per layout, reduced over ranks:

- ``step_s``: ``{min, median, max}`` over the timed steps of the slowest rank's step time;
- ``tokens_per_s``: the step's real tokens (every DP rank's) / the median ``step_s``;
- ``mem_above_baseline_mb`` / ``pss_above_baseline_mb``: max over ranks of the peak RSS / PSS
  during the steps minus that rank's baseline (activations, gradients, optimizer state, encoder
  rows): where sharding shows; ``baseline_mem_mb``: max over ranks of the baseline RSS;
- ``mem_by_tokens``: per probe length, max over ranks of the probe's peak RSS minus the baseline;
- ``peak_mem_mb``: max over ranks of the peak RSS during the steps, absolute; on GPU
  ``torch.cuda.max_memory_allocated`` (and ``cuda_above_baseline_mb`` its growth over the
  allocation at the baseline);
- ``added_mem_mb``: max over ranks of the peak's growth from just before the trainer was built;
- ``speedup_vs_single``, ``mem_vs_single``, ``added_mem_vs_single``,
  ``mem_above_baseline_vs_single``: the layout's figure over the 1x1x1 reference's;
- ``losses``: the loss of the warm-up and of each timed step (``first_loss``: the warm-up's): every
  layout takes the same steps from the same weights, so these agree to rounding (float64 on CPU);
- ``memory_per_rank``: each rank's baseline and peak RSS/PSS.

On CPU each rank gets ``cores // world`` threads (at least one), so every layout has the cores the
reference has; a layout with more ranks than cores time-shares them and cannot be faster than one
process, so its ``speedup_vs_single`` measures overhead, not scaling.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from vlrl.bench.peak_memory import PssSampler, peak_rss_mb, reset_peak_rss
from vlrl.bench.proc_memory import memory_mb
from vlrl.bench.spawned_rank import exit_rank
from vlrl.bench.spread import spread
from vlrl.bench.train_workload import ModelSpec, WorkloadSpec, build_model, write_workload

Shape = tuple[int, int, int]
REFERENCE = "1x1x1"


@dataclass(frozen=True, slots=True)
class Size:
    layouts: tuple[Shape, ...]
    """(DP, CP, TP) of each measured world; the first is the 1x1x1 reference."""
    steps: int
    """Timed steps per layout, after the probes and one warm-up step."""
    workload: WorkloadSpec
    model: ModelSpec = ModelSpec()
    dtype: str = "float64"
    """``Trainer.Config.dtype``. float64 on gloo: FSDP reduces float32/bfloat16 gradients with
    ``PREMUL_SUM``, which gloo lacks (NCCL has it)."""
    lora_rank: int = 0
    """``lora.rank`` of the trainer (its default LLM patterns); 0: full fine-tuning (``vlrl bench lora``)."""


SIZES = {
    "smoke": Size(
        ((1, 1, 1), (2, 1, 1), (1, 1, 2)),
        steps=2,
        workload=WorkloadSpec(groups=1, members=2, min_tokens=800, max_tokens=1600, micro_batch_tokens=1600,
                              screen_scale=4),
        model=ModelSpec(hidden=128, intermediate=256, layers=1, heads=4, kv_heads=2, vision_depth=1),
    ),
    "small": Size(
        ((1, 1, 1), (2, 1, 1), (1, 1, 2)),
        steps=5,
        workload=WorkloadSpec(groups=1, members=3, min_tokens=2000, max_tokens=8000, micro_batch_tokens=8192,
                              screen_scale=4),  # a few minutes on 2 cores; full runs 2k-16k
        model=ModelSpec(intermediate=512, layers=1),
    ),
    "full": Size(
        ((1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (1, 2, 2)),
        steps=5,
        workload=WorkloadSpec(groups=4, members=4, min_tokens=2000, max_tokens=16000, micro_batch_tokens=16384),
        model=ModelSpec(layers=2),  # ~5 GB above baseline per rank at 16k tokens: two ranks fit 24 GiB
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


def workload_figures(metas: list) -> dict[str, Any]:
    """The batch as the trainer should count it: tokens per sequence, screenshots and their tokens."""
    return {
        "sequence_tokens": sorted(m.num_tokens for m in metas),
        "workload_tokens": sum(m.num_tokens for m in metas),
        "turns": sorted(m.turns for m in metas),
        "images": len({i.content_hash for m in metas for i in m.images}),
        "image_tokens": sum(i.num_tokens for m in metas for i in m.images),
    }


# ---- one layout, on every rank of its world ------------------------------------------------------


def _probe(trainer: Any, meta: Any, baseline_rss: float) -> float:
    """Peak RSS above the baseline of forward and backward on ``meta`` alone; the gradients are
    dropped, so the weights stay the starting ones."""
    reset_peak_rss()
    trainer.forward_backward([meta])
    trainer.optimizer.zero_grad(set_to_none=True)
    return peak_rss_mb() - baseline_rss


def measure_layout(
    shape: Shape, model_path: str | Path, workload: WorkloadSpec, steps: int, dtype: str, lora_rank: int = 0
) -> dict[str, Any]:
    """Build the ``Trainer`` for ``shape`` on this world, probe memory, one warm-up and ``steps``
    timed steps; the figures, reduced over ranks (the same on every rank). Collective."""
    import torch
    import torch.distributed as dist

    from vlrl.pack import Layout, MicroBatchPlanner
    from vlrl.store import LocalStore
    from vlrl.train.lora import LoRA
    from vlrl.train.loss import PolicyLoss
    from vlrl.train.optimizer import Optimizer
    from vlrl.train.trainer import Trainer

    cuda = dist.get_backend() == "nccl"
    store = LocalStore()
    metas = write_workload(store, workload, model_path)
    before_build = memory_mb()["rss_mb"]
    config = Trainer.Config(
        dtype=dtype, optim=Optimizer.Config(lr=1e-5), loss=PolicyLoss.Config(kind="grpo"),
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=workload.micro_batch_tokens),
        lora=LoRA.Config(rank=lora_rank),
    )  # fmt: skip
    trainer = config.build(model_path=str(model_path), store=store, layout=Layout(*shape))
    try:
        baseline = memory_mb()
        cuda_baseline = torch.cuda.memory_allocated() / 2**20 if cuda else 0.0
        by_length = sorted(metas, key=lambda m: m.num_tokens)
        probes = {str(m.num_tokens): _probe(trainer, m, baseline["rss_mb"]) for m in (by_length[0], by_length[-1])}
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        reset_peak_rss()
        with PssSampler() as pss:
            warm = trainer.step(metas)
        timed = [trainer.step(metas) for _ in range(steps)]
        peak_rss = peak_rss_mb()
        pushes = [_bytes(trainer.push_state()) for _ in range(2)]  # under LoRA the first adds the adapted bases
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        optimizer_mb = sum(_bytes(s) for s in trainer.optimizer.state.values()) / 2**20
    finally:
        trainer.close()
    mine = {
        "baseline_rss_mb": baseline["rss_mb"], "baseline_pss_mb": baseline["pss_mb"],
        "peak_rss_mb": peak_rss, "peak_pss_mb": pss.peak_pss_mb,
        "added_mem_mb": peak_rss - before_build, "mem_by_tokens": probes,
    }  # fmt: skip
    if cuda:
        mine.update(cuda_peak_mb=torch.cuda.max_memory_allocated() / 2**20, cuda_baseline_mb=cuda_baseline)
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine)
    slowest = torch.tensor([t["step_s"] for t in timed], dtype=torch.float64, device="cuda" if cuda else "cpu")
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    step_s = spread(slowest.tolist())
    worst = lambda key: max(r[key] for r in ranks)  # noqa: E731
    figures = {
        "step_s": step_s,
        "tokens_per_s": warm["real_tokens"] / step_s["median"],
        "mem_above_baseline_mb": max(r["peak_rss_mb"] - r["baseline_rss_mb"] for r in ranks),
        "pss_above_baseline_mb": max(r["peak_pss_mb"] - r["baseline_pss_mb"] for r in ranks),
        "baseline_mem_mb": worst("baseline_rss_mb"),
        "mem_by_tokens": {n: max(r["mem_by_tokens"][n] for r in ranks) for n in probes},
        "peak_mem_mb": worst("cuda_peak_mb") if cuda else worst("peak_rss_mb"),
        "added_mem_mb": worst("added_mem_mb"),
        "first_loss": warm["loss"],
        "losses": [warm["loss"], *(t["loss"] for t in timed)],
        "real_tokens": int(warm["real_tokens"]),
        "micro_batches": int(warm["micro_batches"]),
        "threads_per_rank": torch.get_num_threads(),
        "first_push_bytes": pushes[0],
        "push_bytes": pushes[1],
        "trainable_params": trainable,
        "optimizer_state_mb": optimizer_mb,
        "memory_per_rank": ranks,
        "batch": workload_figures(metas),
    }
    if cuda:
        figures["cuda_above_baseline_mb"] = max(r["cuda_peak_mb"] - r["cuda_baseline_mb"] for r in ranks)
    return figures


def _bytes(tensors: dict | None) -> int:
    """Bytes of the tensors in ``tensors`` (a push, or one parameter's optimizer state); 0 for None
    (a push on a rank other than 0). Sharded tensors count this rank's shard."""
    values = (getattr(v, "_local_tensor", v) for v in (tensors or {}).values())
    return sum(v.numel() * v.element_size() for v in values if hasattr(v, "element_size"))


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
        figures = measure_layout(shape, model_path, size.workload, size.steps, size.dtype, size.lora_rank)
        if rank == 0:
            Path(out).write_text(json.dumps(figures))
    finally:
        dist.destroy_process_group()
    exit_rank()


PORT_TRIES = 3
"""Spawns of one layout when rank 0's port was taken between ``_free_port`` and its listen (another
process on the machine bound it meanwhile: a whole-suite run hit it)."""


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
            for attempt in range(PORT_TRIES):
                try:
                    mp.spawn(_rank_main, args=(world, _free_port(), shape, model_path, size, str(out)), nprocs=world)
                    break
                except mp.ProcessRaisedException as error:
                    if "EADDRINUSE" not in str(error) or attempt == PORT_TRIES - 1:
                        raise
            per_layout[layout_name(shape)] = json.loads(out.read_text())
    return per_layout


# ---- the figures --------------------------------------------------------------------------------


FIGURES = ("tokens_per_s", "step_s", "mem_above_baseline_mb", "pss_above_baseline_mb", "baseline_mem_mb",
           "mem_by_tokens", "peak_mem_mb", "added_mem_mb", "first_loss", "losses")  # fmt: skip
RATIOS = {"speedup_vs_single": "tokens_per_s", "mem_vs_single": "peak_mem_mb", "added_mem_vs_single": "added_mem_mb",
          "mem_above_baseline_vs_single": "mem_above_baseline_mb"}  # fmt: skip
"""Ratio figure -> the figure it divides by the 1x1x1 reference's."""


def summarise(per_layout: dict[str, dict[str, Any]], **about: Any) -> dict[str, Any]:
    """Per-figure dicts keyed by layout, with ratios over the 1x1x1 reference when it ran; the
    batch's own counts (``batch``) from the first layout (every layout writes the same one)."""
    names = list(per_layout)
    figure = lambda key: {name: per_layout[name][key] for name in names if key in per_layout[name]}  # noqa: E731
    result: dict[str, Any] = {"layouts": names}
    for key in FIGURES:
        result[key] = figure(key)
    ref = per_layout.get(REFERENCE)
    if ref is not None:
        for ratio, key in RATIOS.items():
            result[ratio] = {n: per_layout[n][key] / max(ref[key], 1e-9) for n in names}
    for key in ("real_tokens", "micro_batches", "threads_per_rank", "cuda_above_baseline_mb", "memory_per_rank"):
        if values := figure(key):
            result[key] = values
    if names and "batch" in per_layout[names[0]]:
        result["batch"] = per_layout[names[0]]["batch"]
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
    """``vlrl bench train``: tokens/s and memory of each layout of ``size`` (``smoke``/``small``: 1x1x1,
    2x1x1, 1x1x2; ``full``: also 1x2x1 and 1x2x2), gloo on CPU."""
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
                per_layout[layout_name(shape)] = measure_layout(shape, path[0], size.workload, size.steps, size.dtype, size.lora_rank)
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
        about["note"] = "one process for every layout: a layout after the first starts on the memory the earlier ones left"
    return summarise(per_layout, **about, cores=_cores(), steps=size.steps, dtype=size.dtype)


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One table out of several runs' JSON (e.g. one torchrun per layout and backend): figures keyed
    ``backend:layout``, each run's speedup over its backend's 1x1x1 and NCCL's over gloo's."""
    keys = ("tokens_per_s", "peak_mem_mb", "step_s", "mem_above_baseline_mb")
    runs = {
        f"{r['backend']}:{name}": {key: r[key][name] for key in keys if name in r.get(key, {})}
        for r in results for name in r["layouts"]
    }  # fmt: skip
    out: dict[str, Any] = {"runs": list(runs)}
    for key in keys:
        out[key] = {label: figures[key] for label, figures in runs.items() if key in figures}
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
