"""``vlrl bench``: run one benchmark, print its figures, and with ``--json`` end on one JSON line;
``vlrl bench all`` runs every one and writes one report (``vlrl.bench.report``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from vlrl.bench.registry import BENCHMARKS
from vlrl.bench.report import write_report
from vlrl.bench.summary import headline_rows, table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", nargs="?", choices=[*sorted(BENCHMARKS), "all"], help="benchmark to run ('all': every one, then a summary table)"
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--json", action="store_true", help="end the output with one line of JSON")
    parser.add_argument(
        "--size",
        choices=["smoke", "small", "full"],
        default="small",
        help="small fits a 2-core machine in a few minutes; full uses larger batches and longer sweeps;"
        " smoke checks that a benchmark runs here, on its smallest workload (its figures are too noisy to quote)",
    )
    parser.add_argument(
        "--report",
        metavar="DIR",
        help="folder of the report that 'all' writes: report.json, report.md and plots/ (default runs/bench/SIZE);"
        " with one benchmark, its new result replaces that benchmark's in the report there",
    )


def run(args: argparse.Namespace) -> int:
    if args.list or args.name is None:
        for bench in BENCHMARKS.values():
            print(f"{bench.name:<10} {bench.summary}")
        return 0 if args.list else 2
    if args.name == "all":
        return run_all(args)
    started = time.perf_counter()
    result = BENCHMARKS[args.name].load()(args.size)
    result = {"benchmark": args.name, "size": args.size, **result, "wall_s": round(time.perf_counter() - started, 2)}
    print_figures(result)
    if args.report:
        written = update_report(args.report, args.name, args.size, result)
        print(f"\nreport: {written[1]} ({args.name} replaced; {len(written) - 2} plots)", flush=True)
    if args.json:
        sys.stdout.flush()
        print(json.dumps(result, sort_keys=False))
    return 0


def update_report(folder: str, name: str, size: str, result: dict) -> list:
    """Put one benchmark's new ``result`` into the report ``vlrl bench all`` wrote in ``folder``
    (at the same size), and write the report anew; the report names the benchmarks rerun."""
    path = Path(folder) / "report.json"
    if not path.exists():
        raise SystemExit(f"--report {folder}: no report.json there; 'vlrl bench all --report {folder}' writes one")
    report = json.loads(path.read_text())
    if report["size"] != size:
        raise SystemExit(f"--report {folder} holds a --size {report['size']} report; this run is --size {size}")
    report["results"][name] = {k: v for k, v in result.items() if k not in ("benchmark", "size")}
    report["failed"].pop(name, None)
    report["rerun"] = sorted({*report.get("rerun", []), name})
    rows = [row for bench, figures in report["results"].items() for row in headline_rows(bench, figures)]
    report["summary"] = {f"{bench}.{key}": value for bench, key, value, _ in rows}
    return write_report(folder, report, rows)


def run_all(args: argparse.Namespace) -> int:
    """Every benchmark in turn (a failure is reported and the rest still run), then the table."""
    started = time.perf_counter()
    results: dict[str, dict] = {}
    failed: dict[str, str] = {}
    rows = []
    for name, bench in BENCHMARKS.items():
        print(f"== {name}: {bench.summary}", flush=True)
        began = time.perf_counter()
        try:
            results[name] = {**bench.load()(args.size), "wall_s": round(time.perf_counter() - began, 2)}
        except Exception as error:  # one broken benchmark must not hide the others' figures
            failed[name] = f"{type(error).__name__}: {error}"
            print(f"   failed: {failed[name]}", flush=True)
            continue
        rows += headline_rows(name, results[name])
    print()
    print(table(rows))
    summary = {f"{name}.{key}": value for name, key, value, _ in rows}
    report = {"benchmark": "all", "size": args.size, "summary": summary, "failed": failed, "results": results,
              "wall_s": round(time.perf_counter() - started, 2)}  # fmt: skip
    folder = args.report or f"runs/bench/{args.size}"
    written = write_report(folder, report, rows)
    print(f"\nreport: {written[1]} ({len(written) - 2} plots)", flush=True)
    if args.json:
        print(json.dumps(report))
    return 1 if failed else 0


def print_figures(result: dict, indent: str = "") -> None:
    """Human-readable nested figures, one per line."""
    for key, value in result.items():
        if isinstance(value, dict):
            print(f"{indent}{key}:")
            print_figures(value, indent + "  ")
        else:
            shown = f"{value:.4g}" if isinstance(value, float) else value
            print(f"{indent}{key:<24} {shown}")
