"""A fresh interpreter makes a vlrl env through Gymnasium's module prefix (``vlrl.gym:vlrl/...``);
the bridge in this process is tests/unit/gym/test_bridge.py."""

from __future__ import annotations

import subprocess
import sys

def test_a_fresh_interpreter_makes_the_env_through_the_module_prefix():
    script = (
        "import gymnasium\n"
        "assert 'vlrl/desktop-v0' not in gymnasium.registry\n"
        "env = gymnasium.make('vlrl.gym:vlrl/desktop-click-target-v0')\n"
        "obs, _ = env.reset(seed=0)\n"
        "print(obs['screenshot'].shape, obs['goal'])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.startswith("(240, 320, 3) Click")
