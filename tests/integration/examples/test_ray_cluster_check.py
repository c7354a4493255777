"""scripts/ray_cluster_check.py: a recipe runs on a two-node Ray cluster and its pool's hosts use
both nodes (the script starts and stops its own cluster, apart from the test session's Ray)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[3]


def test_hosts_spread_over_two_nodes():
    command = [sys.executable, "scripts/ray_cluster_check.py", sys.executable, "-m", "vlrl.cli", "rollout",
               "examples/policy_rollout.py", "--set", "groups_per_source=1"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and result["ok"], done.stdout[-2000:] + done.stderr[-2000:]
    assert result["nodes"] == 2 and result["job_returncode"] == 0
