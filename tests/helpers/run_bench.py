"""``vlrl bench NAME --size SIZE --json`` for the tests: in this process, on the session's Ray, or
alone in a process with its own Ray; either way the JSON line the command prints, as a dict.

In process is the default: a benchmark starts Ray only when none is up, so on the session's Ray
(``ray_session``) it skips the ~10 s start and the ~1.3 GB a Ray of its own costs. A benchmark
whose figures a shared Ray would disturb (pool), or that its test says why, runs alone."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
from typing import Any

from vlrl.bench import runner


def run_bench(name: str, size: str = "small") -> dict[str, Any]:
    """The benchmark through the CLI's runner in this process (on the session's Ray if it is up)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert runner.run(argparse.Namespace(name=name, list=False, json=True, size=size, report=None)) == 0
    return json.loads(out.getvalue().strip().splitlines()[-1])


def run_bench_alone(name: str, size: str = "small", timeout_s: int = 600) -> dict[str, Any]:
    """The benchmark in a process of its own, which starts its own Ray."""
    done = subprocess.run(
        [sys.executable, "-m", "vlrl.cli", "bench", name, "--size", size, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
