"""Node memory of one shared TP window against a private copy per TP rank, as the kernel counts it.

Every TP rank of a group needs the whole CP window, so ``TPGroupPacker.publish`` writes it once
into a ``/dev/shm`` segment and each rank maps it (``SharedWindow.attach``). This measures what
that saves with real processes: ``tp`` child processes, one per TP rank, each

- ``shared``: attaches the one published segment and reads every byte of the window's arrays, or
- ``private``: attaches it, copies the arrays into fresh anonymous pages of its own laid out as
  the segment is, drops the mapping and reads the copy (what each rank pays when it cuts or
  receives a window of its own),

and all hold their window at once while the parent reads their PSS (``proc_memory.memory_mb``,
anonymous plus shmem: the kinds of memory a window can be in): a page mapped by n processes
counts 1/n in each, so the children's sum is the node memory the window costs. A child's figure
is its PSS holding the window minus its PSS just before it loaded (the children are started and
have imported before any baseline, and drop each window before the next load), and the ratio is
``sum(shared) / sum(private)``: 1/tp when the pages are shared, ~1 if every rank paid for a copy.

The publishing parent maps nothing once ``publish`` has returned (here it only packs; the TP
leader's share is child 0's), and the caller unlinks the segment's name only after the children
have mapped it, as ``RankPacker`` does after its barrier.
"""

from __future__ import annotations

import base64
import mmap
import pickle
import statistics
import subprocess
import sys
from typing import Any

import numpy as np

from vlrl.bench.proc_memory import memory_mb
from vlrl.bench.spread import spread
from vlrl.pack.packer import SharedWindow
from vlrl.pack.shared import SegmentHandle

MODES = ("shared", "private")


def measure(window: SharedWindow, tp: int, rounds: int = 3) -> dict[str, Any]:
    """PSS of ``tp`` children holding ``window`` shared vs privately, ``rounds`` times each
    (alternating); the ratio is the median over rounds."""
    runs: dict[str, list[float]] = {mode: [] for mode in MODES}
    with TPChildren(tp) as children:
        for _ in range(rounds):
            for mode in MODES:
                runs[mode].append(children.pss_mb(window, mode))
    ratios = [shared / private for shared, private in zip(runs["shared"], runs["private"])]
    return {
        "tp": tp,
        "window_mb": window.segment.size / 2**20,
        "shared_pss_mb": spread(runs["shared"]),
        "private_pss_mb": spread(runs["private"]),
        "pss_ratio": statistics.median(ratios),
        "pss_ratio_runs": spread(ratios),
        "ideal": 1 / tp,
    }


class TPChildren:
    """``tp`` child processes (``python -m vlrl.bench.tp_copy_pss``), one per TP rank, driven by
    one-line commands on their stdin: ``shared|private <pickled window>`` loads, ``drop`` frees."""

    def __init__(self, tp: int) -> None:
        self.procs = [
            subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            for _ in range(tp)
        ]
        try:
            self._ask(None, "ready")
        except BaseException:
            self.close()
            raise

    def pss_mb(self, window: SharedWindow, mode: str) -> float:
        """Sum over the children of their PSS (MB) holding ``window`` the ``mode`` way, above each
        one's PSS just before it loaded."""
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}; expected one of {MODES}")
        before = [_window_kinds_pss_mb(proc.pid) for proc in self.procs]
        self._ask(mode.encode() + b" " + base64.b64encode(pickle.dumps(window)), "loaded")
        after = [_window_kinds_pss_mb(proc.pid) for proc in self.procs]  # every child holds its window now
        self._ask(b"drop", "dropped")
        return sum(after) - sum(before)

    def _ask(self, command: bytes | None, answer: str) -> None:
        """Send ``command`` to every child, then wait until each has replied ``answer``."""
        for proc in self.procs if command is not None else ():
            proc.stdin.write(command + b"\n")
            proc.stdin.flush()
        for proc in self.procs:
            line = proc.stdout.readline().decode().strip()
            if line != answer:
                raise RuntimeError(f"TP child {proc.pid} said {line!r} (exit {proc.poll()}); expected {answer!r}")

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()  # end of input: the child exits
        for proc in self.procs:
            proc.wait(timeout=60)

    def __enter__(self) -> TPChildren:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _window_kinds_pss_mb(pid: int) -> float:
    """PSS of the kinds of memory a window can be in: anonymous (a private copy) and shmem (the
    segment). File-backed pages (the code of Python and its libraries) are left out: every Python
    process on the node shares them, so their PSS moves whenever an unrelated process starts or ends."""
    memory = memory_mb(pid)
    return memory["pss_anon_mb"] + memory["pss_shmem_mb"]


def _child() -> None:
    """One TP rank: load each window it is sent, the way the command says, and hold it until ``drop``."""
    _touch({"warm-up": np.zeros(4096, np.uint8)})  # numpy's reduction machinery, before any baseline
    print("ready", flush=True)
    held = None
    for line in sys.stdin.buffer:
        if line.strip() == b"drop":
            held = None  # unmaps the segment or the private copy
            print("dropped", flush=True)
            continue
        mode, _, payload = line.partition(b" ")
        window: SharedWindow = pickle.loads(base64.b64decode(payload))
        held = window.attach().arrays()  # read-only views of the one segment
        if mode == b"private":
            held = private_copy(window.segment, held)  # the segment's views go: it is unmapped
        _touch(held)
        print("loaded", flush=True)


def private_copy(segment: SegmentHandle, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``arrays`` copied into fresh anonymous memory of this process, laid out as ``segment`` is: the
    same pages, private. (Fresh pages, not malloc's: freed heap the baseline already counts would
    hide part of the copy.)"""
    memory = mmap.mmap(-1, segment.size)
    out = {}
    for spec in segment.arrays:
        count = int(np.prod(spec.shape, dtype=np.int64))
        out[spec.name] = np.frombuffer(memory, spec.dtype, count, spec.offset).reshape(spec.shape)
        out[spec.name][...] = arrays[spec.name]
    return out


def _touch(arrays: dict[str, np.ndarray]) -> int:
    """Read every byte (and so fault in every page) of ``arrays``."""
    return sum(int(array.reshape(-1).view(np.uint8).sum()) for array in arrays.values())


if __name__ == "__main__":
    _child()
