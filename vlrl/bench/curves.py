"""The scaling curves of benchmark results: what ``vlrl bench all`` plots.

A benchmark's result holds its curves as data (a sweep over N, a figure per turn count, a
regime grid); ``CURVES`` names, per benchmark, a function that reads them back as ``Curve``
records, so the report plots every one without knowing how each benchmark nests its figures.
A result that lacks a curve's data (an older or failed run) yields no curve, never an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

Points = list[tuple[float, float]]


@dataclass(frozen=True, slots=True)
class Curve:
    """One plot: a line per series over a shared x axis."""

    benchmark: str
    name: str
    """File-safe name, unique within its benchmark."""
    title: str
    x_label: str
    y_label: str
    series: dict[str, Points] = field(default_factory=dict)
    log_x: bool = False
    log_y: bool = False


def _number(value: Any) -> float | None:
    """A figure as a float: a ``spread`` dict gives its median; anything else non-numeric gives None."""
    if isinstance(value, Mapping) and "median" in value:
        value = value["median"]
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _points(rows: list[Mapping[str, Any]], x: str, y: str) -> Points:
    """``(row[x], row[y])`` of the rows that have both as numbers."""
    pairs = ((_number(row.get(x)), _number(row.get(y))) for row in rows)
    return [(a, b) for a, b in pairs if a is not None and b is not None]


def _present(curve: Curve) -> Iterator[Curve]:
    """``curve`` if any series has a point (series without points are dropped)."""
    kept = {name: points for name, points in curve.series.items() if points}
    if kept:
        yield replace(curve, series=kept)


def pool_curves(result: Mapping[str, Any]) -> Iterator[Curve]:
    sweep = result.get("sweep", [])
    figures = (
        ("episodes_per_s", "episodes/s"),
        ("pss_mb_per_instance", "PSS of Ray processes per instance (MB)"),
        ("processes", "Ray processes"),
        ("gcs_fds", "GCS fds"),
    )
    for y, label in figures:
        yield from _present(Curve(
            "pool", f"sweep_{y}", f"{label} vs concurrent episodes (Pillow desktop)", "concurrent episodes", label,
            {name: _points([{"episodes": p["episodes"], **p.get(scheme, {})} for p in sweep], "episodes", y)
             for name, scheme in (("Harness Pool (4 hosts)", "pool"), ("one actor per rollout", "per_rollout"))},
        ))  # fmt: skip


def delta_curves(result: Mapping[str, Any]) -> Iterator[Curve]:
    for key, figures in result.items():
        if not (key in ("http", "vllm") or key.startswith("http_")) or not isinstance(figures, Mapping):
            continue
        screen = figures.get("screen", key.removeprefix("http_"))
        server, prefix = ("vLLM's own server", "vllm_") if key == "vllm" else ("vlrl serve", "")
        turns = sorted(
            (int(match.group(1)), value)
            for name, value in figures.items()
            if (match := re.fullmatch(r"T(\d+)", name)) and isinstance(value, Mapping)
        )
        rows = [{"turns": t, **value} for t, value in turns]
        yield from _present(Curve(
            "delta", f"{prefix}wire_bytes_{screen}", f"HTTP body bytes to {server} per conversation, {screen}", "turns",
            "bytes", {scheme: _points(rows, "turns", f"wire_bytes_{scheme}") for scheme in ("full", "delta")},
            log_y=True,
        ))  # fmt: skip
        yield from _present(Curve(
            "delta", f"{prefix}rollout_speedup_{screen}", f"wall time through {server}, full resend / delta, {screen}",
            "turns",
            "speedup", {"full / delta": _points(rows, "turns", "rollout_speedup")},
        ))  # fmt: skip


def pack_curves(result: Mapping[str, Any]) -> Iterator[Curve]:
    regimes = result.get("regimes", [])
    for dp in sorted({row["dp"] for row in regimes if "dp" in row}):
        rows = [row for row in regimes if row.get("dp") == dp]
        names = [key for key in rows[0] if key.startswith("imbalance_") or key == "lockstep_imbalance"]
        yield from _present(Curve(
            "pack", f"regimes_dp{dp}", f"costliest DP rank / mean at DP {dp}", "sequences per rank", "imbalance",
            {name.removeprefix("imbalance_"): _points(rows, "sequences_per_rank", name) for name in names}, log_x=True,
        ))  # fmt: skip


def driver_curves(result: Mapping[str, Any]) -> Iterator[Curve]:
    series = {}
    for driver in ("metadata", "gather"):
        by_batch = result.get(f"driver_rss_mb_{driver}", {})
        series[driver] = [(float(b), float(v)) for b, v in by_batch.items() if _number(v) is not None]
    yield from _present(Curve(
        "driver", "rss_by_batch", "driver RSS increase holding a batch, metadata only vs gathering",
        "sequences held", "MB above the process's baseline", series, log_y=True,
    ))  # fmt: skip


def encode_curves(result: Mapping[str, Any]) -> Iterator[Curve]:
    by_step = sorted(
        (int(match.group(1)), schemes)
        for key, schemes in result.get("vs_lower_bound", {}).items()
        if (match := re.fullmatch(r"ipr(\d+)", key)) and isinstance(schemes, Mapping)
    )
    names = sorted({name for _, schemes in by_step for name in schemes})
    yield from _present(Curve(
        "encode", "vs_lower_bound", "encoder load: costliest rank / lower bound, worst step", "images per rank",
        "over the lower bound", {n: [(k, s[n]) for k, s in by_step if _number(s.get(n)) is not None] for n in names},
        log_x=True,
    ))  # fmt: skip


def train_curves(result: Mapping[str, Any]) -> Iterator[Curve]:
    by_layout = result.get("mem_by_tokens", {})
    series = {
        layout: [(float(tokens), float(mb)) for tokens, mb in probes.items() if _number(mb) is not None]
        for layout, probes in by_layout.items()
        if isinstance(probes, Mapping)
    }
    yield from _present(Curve(
        "train", "mem_by_tokens", "peak RSS of one sequence's forward and backward, above the pre-step baseline",
        "sequence tokens", "MB above baseline (max over ranks)", series,
    ))  # fmt: skip


def scale_curves(result: Mapping[str, Any]) -> Iterator[Curve]:
    for name, key, what in (
        ("stage_cpu_per_sequence", "curves_cpu_us_per_seq", "each stage (driver's thread; finish: loop hosts)"),
        ("process_cpu_per_sequence", "process_cpu_us_per_seq", "each process kind (all its threads)"),
    ):
        series = {
            label: _points([{"n": float(n), "us": us} for n, us in by_size.items()], "n", "us")
            for label, by_size in result.get(key, {}).items()
        }
        yield from _present(Curve(
            "scale", name, f"CPU per sequence of one RL step, {what}", "sequences per step",
            "CPU microseconds per sequence", series, log_x=True, log_y=True,
        ))  # fmt: skip


CURVES: dict[str, Callable[[Mapping[str, Any]], Iterator[Curve]]] = {
    "scale": scale_curves,
    "train": train_curves,
    "encode": encode_curves,
    "driver": driver_curves,
    "pool": pool_curves,
    "delta": delta_curves,
    "pack": pack_curves,
}


def curves_of(name: str, result: Mapping[str, Any]) -> list[Curve]:
    """Every curve benchmark ``name``'s ``result`` holds."""
    reader = CURVES.get(name)
    return list(reader(result)) if reader else []
