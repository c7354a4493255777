"""Micro-batch planner benchmark: DP-rank balance and planning time on a GUI-agent batch.

Lengths are multi-turn GUI trajectories: lognormal around 4k tokens (sigma 0.8) clipped to
1k..32k, so most trajectories are a few turns and a long tail runs near the context limit.
Costs use the default ``CostModel`` (a 32k trajectory costs ~1.6x its length).

Figures of ``measure``:
- ``imbalance_planner`` / ``imbalance_kk`` / ``imbalance_naive``: costliest DP rank over the
  mean (1.0 is perfect) for the planner, for plain Karmarkar-Karp on the same costs, and for
  contiguous chunks in arrival order (a plain distributed sampler);
- ``imbalance_external_kk``: the same for verl's Karmarkar-Karp (``vlrl.bench.external_kk``) on
  the same costs and DP: a reference vlrl did not write, where ``imbalance_kk`` is the planner's
  own seed;
- ``step_imbalance``: the same ratio for the i-th micro-batch of every rank, averaged over i;
- ``plan_seconds`` (the whole plan of ``n_sequences``), ``kk_seconds`` (vlrl's KK alone) and
  ``external_kk_seconds`` (verl's), each ``spread`` over ``repeats`` runs in rotated order;
- ``micro_batches`` per rank, ``empty_micro_batches`` in all, and ``fill``: real tokens over
  micro-batches x budget;
- ``imbalance_lower_bound``: what no partition can beat, ``max(largest, total / dp)`` over the
  mean; ``lockstep_imbalance``: ranks wait for each other at every micro-batch, so a step takes
  the sum over micro-batch index of the slowest rank's cost; this is that sum over the mean
  rank's total.

``regimes`` adds the hard cases, 2 to 64 sequences per rank at DP 8 to 64, where the lower bound
is far from 1 (verl's KK beside the planner and ours), and ``exact`` compares the planner and
both KKs with the optimum that exhaustive search finds on small cases (10 sequences on 2 or 3
ranks).
"""

from __future__ import annotations

import itertools
import math
import time
from typing import Any

import numpy as np

from vlrl.bench import external_kk
from vlrl.bench.spread import spread
from vlrl.pack.kk import karmarkar_karp
from vlrl.pack.plan import imbalance
from vlrl.pack.planner import MicroBatchPlanner

SIZES = {"smoke": 1024, "small": 4096, "full": 65536}
REPEATS = 5


def draw_lengths(n: int, seed: int) -> np.ndarray:
    """``(n,)`` token counts of multi-turn GUI trajectories (1k..32k, median ~4k)."""
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(np.log(4096), 0.8, n), 1024, 32768).astype(np.int64)


def measure(
    n_sequences: int = 65536,
    dp: int = 8,
    budget: int = 65536,
    seed: int = 0,
    *,
    external: bool = True,
    repeats: int = 1,
) -> dict[str, Any]:
    """Plan ``n_sequences`` drawn trajectories for ``dp`` ranks under a ``budget``-token micro-batch
    (at least 32768, the longest trajectory) with the planner, KK, verl's KK (unless not
    ``external``) and the naive split, timing each ``repeats`` times."""
    lengths = draw_lengths(n_sequences, seed)
    keys = [f"bench/{i}" for i in range(n_sequences)]
    planner = MicroBatchPlanner.Config(max_tokens_per_micro_batch=budget).build()
    costs = planner.cost_model.sequence_costs(lengths)

    if external:
        external_kk.load()  # verl's import (seconds: torch, ray) stays out of the timers
    runs = {
        "plan": lambda: planner.plan_lengths(keys, lengths, dp),
        "kk": lambda: karmarkar_karp(costs, dp),
        **({"external_kk": lambda: external_kk.verl_partitions(costs, dp)} if external else {}),
    }
    results, seconds = _timed(runs, repeats)
    plan, kk_parts = results["plan"], results["kk"]

    # Per-rank totals summed exactly (math.fsum) so that equal partitions compare equal.
    index = {key: i for i, key in enumerate(keys)}
    planner_ranks = np.array([math.fsum(costs[index[k]] for mb in batches for k in mb.keys) for batches in plan.ranks])
    kk_ranks = np.array([math.fsum(costs[part]) for part in kk_parts])
    per_step = np.array([[mb.cost for mb in batches] for batches in plan.ranks])  # (dp, m)
    step_imbalance = float(np.mean([imbalance(column) for column in per_step.T])) if per_step.size else 1.0
    slots = dp * plan.num_micro_batches * budget
    external_figures = {}
    if external:
        external_figures = {
            "imbalance_external_kk": imbalance(external_kk.rank_totals(costs, results["external_kk"])),
            "external_kk_seconds": seconds["external_kk"],
        }
    return {
        "n_sequences": n_sequences,
        "dp": dp,
        "budget": budget,
        "imbalance_planner": imbalance(planner_ranks),
        "imbalance_kk": imbalance(kk_ranks),
        "imbalance_naive": imbalance(np.array([chunk.sum() for chunk in np.array_split(costs, dp)])),
        **external_figures,
        "step_imbalance": step_imbalance,
        "plan_seconds": seconds["plan"],
        "kk_seconds": seconds["kk"],
        "micro_batches": plan.num_micro_batches,
        "empty_micro_batches": sum(not mb.keys for batches in plan.ranks for mb in batches),
        "fill": float(lengths.sum()) / slots if slots else 0.0,
        "imbalance_lower_bound": lower_bound(costs, dp),
        "lockstep_imbalance": float(per_step.max(axis=0).sum() / per_step.sum(axis=1).mean()) if per_step.size else 1.0,
    }


def _timed(runs: dict[str, Any], repeats: int) -> tuple[dict[str, Any], dict[str, dict[str, float]]]:
    """Each of ``runs`` called once to warm up, then ``repeats`` times, the order rotated every round
    so none always goes first: its last result and the ``spread`` of its timed wall times."""
    names = list(runs)
    results = {name: run() for name, run in runs.items()}
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            started = time.perf_counter()
            results[name] = runs[name]()
            times[name].append(time.perf_counter() - started)
    return results, {name: spread(values) for name, values in times.items()}


def lower_bound(costs: np.ndarray, dp: int) -> float:
    """The smallest costliest-rank / mean any partition of ``costs`` over ``dp`` ranks can reach."""
    mean = float(costs.sum()) / dp
    return max(float(costs.max()), mean) / mean


def regimes(dps=(8, 32, 64), per_rank=(2, 4, 16, 64), seed: int = 0) -> list[dict[str, Any]]:
    """Planner, KK, verl's KK and the lower bound where balance is hard: few sequences per rank."""
    out = []
    for dp, k in itertools.product(dps, per_rank):
        figures = measure(dp * k, dp=dp, budget=65536, seed=seed)
        keep = (
            "imbalance_planner",
            "imbalance_kk",
            "imbalance_external_kk",
            "imbalance_lower_bound",
            "lockstep_imbalance",
        )
        out.append({"dp": dp, "sequences_per_rank": k, **{key: figures[key] for key in keep}})
    return out


def optimum(costs: np.ndarray, k: int) -> float:
    """The smallest costliest-rank total over every assignment of ``costs`` to ``k`` ranks (exhaustive,
    ranks interchangeable: the first sequence goes to rank 0)."""
    best = math.inf
    for rest in itertools.product(range(k), repeat=len(costs) - 1):
        totals = np.bincount((0, *rest), weights=costs, minlength=k)
        best = min(best, float(totals.max()))
    return best


def exact(cases: int = 20, n: int = 10, ks=(2, 3), seed: int = 0) -> dict[str, Any]:
    """Mean and worst costliest rank over the optimum's, for the planner, KK and verl's KK, on small cases."""
    rng = np.random.default_rng(seed)
    planner = MicroBatchPlanner.Config(max_tokens_per_micro_batch=65536).build()
    ratios: dict[str, list[float]] = {"planner": [], "kk": [], "external_kk": []}
    for _, k in itertools.product(range(cases), ks):
        lengths = np.clip(rng.lognormal(np.log(4096), 0.8, n), 1024, 32768).astype(np.int64)
        costs = planner.cost_model.sequence_costs(lengths)
        best = optimum(costs, k)
        plan = planner.plan_lengths([str(i) for i in range(n)], lengths, k)
        ratios["planner"].append(float(plan.rank_costs().max()) / best)
        ratios["kk"].append(max(math.fsum(costs[part]) for part in karmarkar_karp(costs, k)) / best)
        verl_totals = external_kk.rank_totals(costs, external_kk.verl_partitions(costs, k))
        ratios["external_kk"].append(float(verl_totals.max()) / best)
    return {
        "cases": cases * len(ks),
        "sequences": n,
        **{f"{name}_over_optimum_mean": float(np.mean(r)) for name, r in ratios.items()},
        **{f"{name}_over_optimum_max": float(np.max(r)) for name, r in ratios.items()},
    }


def run(size: str) -> dict[str, Any]:
    """``vlrl bench pack``: the planner (``small`` 4k sequences, ``full`` 64k, 8 DP ranks) against
    verl's KK, and the TP-group packer's CP-window fetch and shared copy (``vlrl.bench.packer_bench``);
    ``tp_copy_pss_ratio`` is the measured PSS ratio at the largest TP size (``tp_copy_pss_tp``)."""
    from vlrl.bench import packer_bench

    planner = measure(SIZES[size], dp=8, budget=65536, seed=0, repeats=REPEATS)
    packer = packer_bench.run(size)
    largest_tp = max(packer["tp_copy_pss"].values(), key=lambda r: r["tp"])
    return {
        "planner": planner,
        "regimes": regimes(),
        "exact": exact(),
        "packer": packer,
        "imbalance_planner": planner["imbalance_planner"],
        "imbalance_kk": planner["imbalance_kk"],
        "imbalance_external_kk": planner["imbalance_external_kk"],
        "imbalance_lower_bound": planner["imbalance_lower_bound"],
        "lockstep_imbalance": planner["lockstep_imbalance"],
        "plan_seconds": planner["plan_seconds"],
        **{f"cp_fetch_ratio_cp{cp}": packer[f"cp{cp}"]["cp_fetch_ratio"] for cp in (2, 4)},
        "tp_copy_pss_ratio": largest_tp["pss_ratio"],
        "tp_copy_pss_tp": largest_tp["tp"],
    }
