"""``vlrl bench all``: every benchmark in turn, then one table of the ratios that matter.

Each benchmark measures vlrl's way and a naive baseline side by side; ``HEADLINES`` names, per
benchmark, the figures that compare them (glob patterns over dotted keys of its result, so a
per-backend or per-layout figure is found wherever it nests) and what each is measured against.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Any

HEADLINES: dict[str, tuple[tuple[str, str], ...]] = {
    "store": (
        ("*projection_ratio", "bytes of one field / whole row (lower is better)"),
        ("*range_ratio", "bytes of a token range / whole row (lower is better)"),
    ),
    "pool": (
        ("actors_pool", "Ray actors, pool"),
        ("actors_per_rollout", "Ray actors, one per rollout (baseline)"),
        ("throughput_ratio", "pool episodes/s / per-rollout actors (their start-up excluded)"),
        ("throughput_ratio_with_startup", "the same, the per-rollout actors' start-up included"),
        ("throughput_ratio_vs_actor_pool", "pool episodes/s / a fixed ray.util.ActorPool of as many actors"),
        ("thread_offload_ratio", "harness calls side by side on threads / one at a time"),
        ("core_ms_ratio", "CPU per step, pool / per-rollout actors (every process of the run; medians)"),
        ("ray_hop_share", "CPU of one bare Ray step call / CPU per step of a per-rollout actor"),
    ),
    "delta": (
        ("http.T*wire_full_over_delta", "HTTP body bytes to vlrl serve, full resend / delta"),
        ("http.T*rollout_speedup", "conversation wall time through vlrl serve, full resend / delta (median)"),
        ("vllm.T*wire_full_over_delta", "HTTP body bytes to vLLM's own server, full resend / delta"),
        ("vllm.T*rollout_speedup", "conversation wall time through vLLM's server, full resend / delta (median)"),
        ("delta_over_bound", "delta bytes / every image once (1.0 is exact)"),
    ),
    "driver": (
        ("driver_mem_ratio", "driver RSS increase, metadata only / gathering (measured, largest common batch)"),
        ("per_sequence_mb*", "driver RSS per sequence held (gather: measured slope; metadata: upper bound)"),
    ),
    "pack": (
        ("imbalance_planner", "costliest DP rank / mean (1.0 is perfect)"),
        ("imbalance_kk", "the same for plain Karmarkar-Karp (the planner's seed)"),
        ("imbalance_external_kk", "the same for verl 0.9.1's Karmarkar-Karp (external code)"),
        ("imbalance_lower_bound", "the same, the best any partition can do"),
        ("lockstep_imbalance", "sum over micro-batches of the slowest rank / mean rank (what ranks wait on)"),
        ("exact.*over_optimum_max", "costliest rank / exhaustive optimum, worst of 40 small cases"),
        ("cp_fetch_ratio_cp*", "bytes fetched for a CP window / whole rows (ideal 1/CP)"),
        ("tp_copy_pss_ratio", "summed PSS of TP-rank processes mapping one window / each holding a copy (ideal 1/TP)"),
        ("tp_copy_pss_tp", "TP ranks of that measurement"),
    ),
    "encode": (
        ("imbalance_planner", "encoder load max/mean, planner"),
        ("imbalance_contiguous", "the same, Vision-DP contiguous bin-packing"),
        ("imbalance_token_owner", "the same, encode where the tokens land"),
        ("imbalance_vs_lower_bound", "the planner's costliest rank / max(largest image, total / world)"),
        ("fetch_ratio", "pixel bytes per rank / fetch-all (ideal 1/world)"),
        ("a2a_over_allgather_sp_measured", "embedding bytes at the collectives, all-to-all / per-replica all-gather"),
        ("speedup_vs_token_owner", "encode wall time, token owner / planner (4 gloo ranks)"),
        ("speedup_vs_allgather_sp", "the same, per-replica contiguous + all-gather (Vision-DP) / planner"),
        ("speedup_vs_padded_allgather_sp", "the same, per-replica LPT + padded all-gather (vLLM) / planner"),
        ("dedup_saving", "encoder work saved by encoding repeats once"),
    ),
    "train": (
        ("*speedup_vs_single*", "tokens/s of the layout / single process"),
        ("*mem_above_baseline_vs_single*", "memory above the pre-step baseline, layout / single process"),
    ),
    "lora": (
        ("*lora_over_full*", "LoRA (rank 16) / full fine-tuning: push bytes, optimizer state, RSS, step time"),
    ),
    "chaos": (
        ("survived", "runs (one per fault kind) that finished their steps"),
        ("books_exact", "runs whose group books balanced after every step"),
        ("keys_left", "store keys left after close, all runs together (0: nothing leaked)"),
    ),
    "learning": (
        ("lowest_below_warm", "largest fall below the warm start from step 10 on, any seed (bar: 0.05)"),
        ("last*", "held-out success at the end, min and max over the seeds (bar at full size: 0.85)"),
    ),
    "rollout": (
        ("vllm_over_embedded_*", "the main job's rollouts, vLLM / embedded engine (median)"),
    ),
    "async": (
        ("*speedup", "RL wall time, synchronous / asynchronous (same steps, same warm start)"),
        ("*success_*", "held-out success after the same steps"),
    ),
    "tiles": (
        ("stored_over_png*", "bytes the store holds as tiles / one PNG per distinct image"),
        ("fetch_over_png_decode*", "fetching one image from the store / decoding its PNG (median)"),
    ),
    "scale": (
        ("linearity", "driver CPU per sequence, largest measured batch / smallest (1.0: linear)"),
        ("*growth", "CPU per sequence of the fastest-growing stage, largest measured batch / smallest"),
    ),
    "xdesktop": (
        ("*warm_over_cold", "reset of a reused instance / a new instance per episode (lower is better)"),
        ("*rss_mb*", "MB resident per instance (X server, window manager, apps)"),
    ),
    "sandbox": (
        ("*start_s_ratio", "new instance to first observation, sandbox / none (medians)"),
        ("*step_s_ratio", "oracle step, sandbox / none"),
        ("*reset_s_ratio", "reset of a reused instance, sandbox / none"),
        ("*pss_mb_ratio", "memory of the instance's process tree, sandbox / none"),
    ),
}


def is_spread(value: Any) -> bool:
    """A repeated timing as ``spread`` reports it: ``{min, median, max, ...}``."""
    return isinstance(value, Mapping) and {"min", "median", "max"} <= value.keys()


def flatten(result: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested figures as ``{"a.b.c": value}``; a spread stays one figure."""
    out: dict[str, Any] = {}
    for key, value in result.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and not is_spread(value):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def headline_rows(name: str, result: Mapping[str, Any]) -> list[tuple[str, str, Any, str]]:
    """``(benchmark, figure, value, against what)`` for every headline figure found in ``result``."""
    flat = flatten(result)
    rows = []
    for pattern, meaning in HEADLINES.get(name, ()):
        for key in sorted((k for k in flat if fnmatch.fnmatchcase(k, pattern)), key=_natural):
            value = flat[key]
            if is_spread(value) or (isinstance(value, (int, float)) and not isinstance(value, bool)):
                rows.append((name, key, value, meaning))
    return rows


def _natural(key: str) -> list:
    """Sort key putting ``T5`` before ``T15``: digit runs compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", key)]


def shown(value: Any) -> str:
    """A figure for a table: a spread as ``median (min-max)``, a float to 4 significant digits."""
    if is_spread(value):
        return f"{shown(value['median'])} ({shown(value['min'])}-{shown(value['max'])})"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def table(rows: list[tuple[str, str, Any, str]]) -> str:
    """A fixed-width table of headline rows."""
    lines = [f"{'benchmark':<10} {'figure':<40} {'value':>10}  against", "-" * 100]
    for name, key, value, meaning in rows:
        lines.append(f"{name:<10} {key:<40} {shown(value):>10}  {meaning}")
    return "\n".join(lines)


def markdown_table(rows: list[tuple[str, str, Any, str]]) -> str:
    """The headline rows as a Markdown table."""
    lines = ["| benchmark | figure | value | against |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | `{key}` | {shown(value)} | {meaning} |" for name, key, value, meaning in rows]
    return "\n".join(lines)
