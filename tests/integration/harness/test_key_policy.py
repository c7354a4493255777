"""The key policy survives Ray shipping a harness class by value: rebuilt in a fresh interpreter, the
class checks each action once. The policy in this process is tests/unit/harness/test_key_policy.py."""

from __future__ import annotations

import subprocess
import sys

from ray import cloudpickle

from tests.unit.harness.test_key_policy import Recording


REBUILD = """
import sys
from ray import cloudpickle
from vlrl.harness import Action, ActionError

shipped = cloudpickle.loads(sys.stdin.buffer.read())
assert not hasattr(shipped.step.__wrapped__, "__wrapped__"), "step wrapped twice"
try:
    shipped().step(Action.key("ctrl", "alt", "delete"))
except ActionError:
    print("refused")
"""


def test_the_check_survives_shipping_the_class_by_value():
    """Ray ships a harness class defined in a recipe by value: rebuilt in a worker, it checks once."""

    class Shipped(Recording):
        def step(self, action):
            return super().step(action)

    done = subprocess.run(
        [sys.executable, "-c", REBUILD], input=cloudpickle.dumps(Shipped), capture_output=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.decode().strip() == "refused", done.stderr.decode()[-1000:]
