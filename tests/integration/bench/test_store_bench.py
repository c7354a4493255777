"""``vlrl bench --list`` in a fresh interpreter names the store benchmark first (its figures are
tests/e2e/bench/test_store_bench.py)."""

from __future__ import annotations

import subprocess
import sys


def test_bench_list_names_the_store_benchmark():
    done = subprocess.run([sys.executable, "-m", "vlrl.cli", "bench", "--list"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("store ")
