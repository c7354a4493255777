"""Expert parallelism on the tiny Qwen3-VL-MoE, measured: what the all-to-alls carry and what each
rank holds, with and without ``layout.ep``.

Each layout runs in a spawn of its own (so a rank's peak RSS is its own layout's): a float32
``Trainer`` on gloo ranks takes one step on the parallel tests' workload
(``vlrl.bench.trainer_workload``: packed multi-turn sequences with images), every call of
``all_to_all_single`` over the EP group counted (rows and bytes this rank sent to and received
from the other ranks, its own split excluded, as ``vlrl.bench.collective_bytes`` counts), and
each rank reports:

- ``a2a``: per kind (the expert-count exchange, the forward dispatch and combine, and their
  backward), the calls, the bytes sent off-rank in the step and the most in one call;
- ``expert_bytes_held``: the expert tensors' bytes the rank stores between steps (its FSDP shard);
  ``expert_bytes_gathered``: what one sparse layer's experts take while it computes (FSDP's
  unsharded copy: every expert without EP, ``E / ep`` with it);
- ``rss_mb`` after the step and ``peak_rss_mb`` (the kernel's high-water mark of the process).

    .venv/bin/python scripts/expert_parallel.py [--layouts 2,1,1 2,1,1,2 1,2,1 1,2,1,2]

CPU, a minute or two per layout. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from vlrl.bench.trainer_workload import make_workload
from vlrl.bench.worlds import World, run_worlds
from vlrl.models import build_tiny
from vlrl.pack import Layout
from vlrl.train.trainer import Trainer


def _rank_main(rank: int, world: int, shape: tuple[int, ...], model_path: str, work) -> dict:
    layout = Layout(*shape[:3], ep=shape[3] if len(shape) > 3 else 1)
    trainer = Trainer.Config(dtype="float32").build(model_path=model_path, store=work.store(), layout=layout)
    calls: list[tuple[str, int]] = []
    original = dist.all_to_all_single

    def counted(output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False):
        work_ = original(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)
        if group is not None and group is trainer.parallel.ep_group:
            me, size = dist.get_rank(group), dist.get_world_size(group)
            row = input.nbytes // max(input.shape[0], 1)
            own = input_split_sizes[me] if input_split_sizes else input.shape[0] // size
            backward = torch._C._current_autograd_node() is not None  # inside the autograd engine
            kind = "counts" if input.dtype == torch.int64 else "backward" if backward else "forward"
            calls.append((kind, (input.shape[0] - own) * row))
        return work_

    dist.all_to_all_single = counted
    metrics = trainer.step(work.metas)
    dist.all_to_all_single = original
    a2a: dict[str, dict[str, int]] = {}
    for kind, sent in calls:
        entry = a2a.setdefault(kind, {"calls": 0, "bytes_sent": 0, "max_call": 0})
        entry["calls"] += 1
        entry["bytes_sent"] += sent
        entry["max_call"] = max(entry["max_call"], sent)
    held = gathered = 0
    for block in trainer.model.routed:
        for param in (block.experts.gate_up_proj, block.experts.down_proj):
            local = param.to_local() if hasattr(param, "to_local") else param
            held += local.nbytes
            gathered += param.numel() // layout.ep * local.element_size()  # E / ep whole experts
    trainer.close()
    rss = int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) / 1024
    return {
        "loss": metrics["loss"], "a2a": a2a, "expert_bytes_held": held,
        "expert_bytes_gathered": gathered // len(trainer.model.routed), "rss_mb": round(rss, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layouts", nargs="+", default=["2,1,1", "2,1,1,2", "1,2,1", "1,2,1,2"])
    args = parser.parse_args()
    out = {}
    with tempfile.TemporaryDirectory(prefix="vlrl-ep-") as tmp:
        path = build_tiny("qwen3_vl_moe", Path(tmp) / "model")
        work = make_workload(path)
        for i, name in enumerate(args.layouts):
            shape = tuple(int(x) for x in name.split(","))
            world = shape[0] * shape[1] * shape[2]
            ranks = run_worlds(Path(tmp) / f"w{i}", [World(world, _rank_main, (shape, str(path), work))])[0]
            out["x".join(map(str, shape[:3])) + (f" ep={shape[3]}" if len(shape) > 3 else "")] = ranks
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
