"""``tree_cpu``: a child that computed shows its CPU seconds under its pid; this process's parent,
outside its tree, is never counted."""

from __future__ import annotations

import os
import subprocess
import sys

from vlrl.bench.process_cpu import cpu_between, tree_cpu

SPIN_THEN_WAIT = """
import time
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
print(flush=True)
time.sleep(30)
"""


def test_a_child_that_spun_is_counted_and_the_parent_is_not():
    before = tree_cpu()
    child = subprocess.Popen([sys.executable, "-c", SPIN_THEN_WAIT], stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()  # it has spun 0.3 s of CPU and now sleeps
        used = cpu_between(before, tree_cpu())
    finally:
        child.kill()
        child.wait()
    assert 0.3 <= used[child.pid] < 1.3  # its spin, and the interpreter's start
    assert os.getpid() in used and os.getppid() not in used
