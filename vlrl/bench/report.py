"""The report of ``vlrl bench all``: one folder a run, so that every quoted figure has a source.

- ``report.json``: every benchmark's full result, the headline summary and the failures;
- ``report.md``: the command, the headline table (timings as median (min-max)), the failures,
  and every scaling curve's plot;
- ``plots/BENCH_CURVE.png``: one plot per scaling curve (``vlrl.bench.curves``).
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

from vlrl.bench.curves import Curve, curves_of
from vlrl.bench.summary import markdown_table

PLOTS = "plots"


def write_report(folder: str | Path, report: dict[str, Any], rows: list[tuple[str, str, Any, str]]) -> list[Path]:
    """Write ``report`` (what ``vlrl bench all --json`` prints) into ``folder``; returns the files."""
    folder = Path(folder)
    (folder / PLOTS).mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    curves = [curve for name, result in report["results"].items() for curve in curves_of(name, result)]
    plots = [plot(curve, folder / PLOTS / f"{curve.benchmark}_{curve.name}.png") for curve in curves]
    lines = [
        f"# vlrl bench all --size {report['size']}",
        "",
        f"Measured with `vlrl bench all --size {report['size']}` on {platform.node()}"
        f" ({platform.machine()}, {_cores()} cores) in {report['wall_s']:.0f} s.",
        "",
        markdown_table(rows),
        "",
    ]
    if report.get("rerun"):
        reruns = ", ".join(f"`vlrl bench {name} --size {report['size']} --report DIR`" for name in report["rerun"])
        lines[4:4] = [f"Rerun since, each replacing its benchmark's figures: {reruns}.", ""]
    if report["failed"]:
        lines += ["## Failed", "", *(f"- `{name}`: {error}" for name, error in report["failed"].items()), ""]
    if curves:
        lines += ["## Scaling curves", ""]
        lines += [f"![{curve.title}]({PLOTS}/{path.name})\n" for curve, path in zip(curves, plots)]
    (folder / "report.md").write_text("\n".join(lines) + "\n")
    return [folder / "report.json", folder / "report.md", *plots]


def plot(curve: Curve, path: Path) -> Path:
    """One PNG: a line with markers per series."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for name, points in curve.series.items():
        xs, ys = zip(*sorted(points))
        ax.plot(xs, ys, marker="o", label=name)
    ax.set(title=curve.title, xlabel=curve.x_label, ylabel=curve.y_label)
    if curve.log_x:  # ticks at the measured points, written plainly (2, 4, 16, 64)
        ax.set_xscale("log")
        ax.set_xticks(sorted({x for points in curve.series.values() for x, _ in points}))
        ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_yscale("log" if curve.log_y else "linear")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))
