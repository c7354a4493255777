"""``vlrl bench``: run one benchmark, print its figures, and with ``--json`` end on one JSON line."""

from __future__ import annotations

import argparse
import json
import sys
import time

from vlrl.bench.registry import BENCHMARKS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", choices=sorted(BENCHMARKS), help="benchmark to run")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--json", action="store_true", help="end the output with one line of JSON")
    parser.add_argument(
        "--size",
        choices=["small", "full"],
        default="small",
        help="small fits a 2-core machine in about a minute; full uses larger batches",
    )


def run(args: argparse.Namespace) -> int:
    if args.list or args.name is None:
        for bench in BENCHMARKS.values():
            print(f"{bench.name:<10} {bench.summary}")
        return 0 if args.list else 2
    started = time.perf_counter()
    result = BENCHMARKS[args.name].load()(args.size)
    result = {"benchmark": args.name, "size": args.size, **result, "wall_s": round(time.perf_counter() - started, 2)}
    print_figures(result)
    if args.json:
        sys.stdout.flush()
        print(json.dumps(result, sort_keys=False))
    return 0


def print_figures(result: dict, indent: str = "") -> None:
    """Human-readable nested figures, one per line."""
    for key, value in result.items():
        if isinstance(value, dict):
            print(f"{indent}{key}:")
            print_figures(value, indent + "  ")
        else:
            shown = f"{value:.4g}" if isinstance(value, float) else value
            print(f"{indent}{key:<24} {shown}")
