"""Several gloo worlds run by one set of spawned processes.

Every spawned process pays ~4-5 CPU s of imports (torch, transformers, torch._dynamo) before it
does any work, and a test module's worlds (a 4-rank layout, 2-rank layouts, a 1-rank run, each
for several cases) used to spawn their own processes each. ``run_worlds`` spawns the largest
world's processes once; each ``World`` then runs on its first ``size`` processes in a fresh
default process group (destroyed before the next world forms), the others skipping it. Worlds
run one after another in the order given, so a case sees the same ranks, groups and collectives
as in processes of its own.

Put the largest worlds first: a process whose rank no later world includes is done early,
instead of waiting at the next rendezvous.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT = timedelta(seconds=180)
"""Of one world's rendezvous and each of its collectives, unless a ``World`` says otherwise: a
rank waits at most this long for the others."""


@dataclass(frozen=True)
class World:
    """``fn(rank, world_size, *args)`` on ``size`` ranks, returning something picklable (each
    rank's return value comes back); ``timeout``: of the world's rendezvous and collectives."""

    size: int
    fn: Callable[..., Any]
    args: tuple = field(default_factory=tuple)
    timeout: timedelta = TIMEOUT


def run_worlds(tmp_path: Path, worlds: Sequence[World]) -> list[list[Any]]:
    """Each world's return values, ``results[world][rank]``, from one spawn of
    ``max(size)`` processes (the worlds pickled to a file, read by every process)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    plan = tmp_path / "worlds.pkl"
    plan.write_bytes(pickle.dumps(list(worlds)))
    processes = max(world.size for world in worlds)
    mp.spawn(_process_main, args=(str(plan), str(tmp_path)), nprocs=processes)
    per_rank = [pickle.loads((tmp_path / f"rank{rank}.pkl").read_bytes()) for rank in range(processes)]
    return [[per_rank[rank][i] for rank in range(world.size)] for i, world in enumerate(worlds)]


def _process_main(rank: int, plan: str, folder: str) -> None:
    with open(plan, "rb") as f:
        worlds: list[World] = pickle.load(f)
    results: dict[int, Any] = {}
    for i, world in enumerate(worlds):
        if rank >= world.size:
            continue
        rendezvous = f"file://{folder}/rdzv{i}"
        dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world.size, timeout=world.timeout)
        try:
            results[i] = world.fn(rank, world.size, *world.args)
        finally:
            dist.destroy_process_group()
    with open(f"{folder}/rank{rank}.pkl", "wb") as f:
        pickle.dump(results, f)
