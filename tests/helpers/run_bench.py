"""Run ``vlrl bench NAME --json`` in its own process (its own Ray) and return the JSON line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def run_bench(name: str, timeout_s: int = 600, size: str = "small") -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "vlrl.cli", "bench", name, "--size", size, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
