"""MiniWoB's Chromium in its sandbox: unprivileged, its own sandbox on, in a network namespace of its
own, driven by the node's ChromeDriver through the relay; ``sandbox='none'`` keeps the old way."""

from __future__ import annotations

import os

import psutil
import pytest

from harnesses.miniwob import MiniWoBHarness


def _chromium(harness: MiniWoBHarness) -> list[psutil.Process]:
    return [p for p in map(psutil.Process, harness.browser.processes()) if "chromium" in p.cmdline()[0]]


@pytest.mark.parametrize("sandbox", ["bubblewrap", "none"])
def test_chromium_runs_contained_only_in_the_sandbox(sandbox):
    harness = MiniWoBHarness(tasks=("click-button",), sandbox=sandbox)
    try:
        harness.reset(seed=0)
        _, _, terminated, _, info = harness.step(harness.oracle())
        assert terminated and info["success"]  # ChromeDriver drives it either way
        chromium = _chromium(harness)
        assert chromium
        node_netns = os.readlink("/proc/self/ns/net")
        contained = [p.uids().real == 65534 and os.readlink(f"/proc/{p.pid}/ns/net") != node_netns for p in chromium]
        assert all(contained) if sandbox == "bubblewrap" else not any(contained)
        flagged = any("--no-sandbox" in p.cmdline() for p in chromium)
        assert flagged == (sandbox == "none" and os.geteuid() == 0)
    finally:
        harness.close()
