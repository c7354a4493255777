"""Chromium in the browser harness's sandbox: it runs as the unprivileged user with its own sandbox
on (seccomp in its renderers, no ``--no-sandbox``), and a page cannot read the node's files."""

from __future__ import annotations

import uuid
from pathlib import Path

import psutil

from harnesses.browser import BrowserHarness


def _status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def test_chromium_runs_unprivileged_with_its_own_sandbox_on():
    harness = BrowserHarness()
    try:
        harness.reset(seed=0)
        chromium = [p for p in harness.processes() if "chromium" in " ".join(psutil.Process(p).cmdline()[:1])]
        renderers = [p for p in chromium if "--type=renderer" in psutil.Process(p).cmdline()]
        assert chromium and renderers
        assert all(_status(p)["Uid"].split()[0] == "65534" for p in chromium)
        assert all(_status(p)["Seccomp"] == "2" for p in renderers)  # seccomp-bpf filter mode
        assert not any("--no-sandbox" in psutil.Process(p).cmdline() for p in chromium)
    finally:
        harness.close()


def test_a_page_cannot_read_the_nodes_files():
    canary = Path("/root") / f".vlrl-canary-{uuid.uuid4().hex}.txt"
    canary.write_text("node secret")
    canary.chmod(0o644)  # readable by anyone on the node: only the sandbox keeps it out
    harness = BrowserHarness()
    try:
        page = harness._browser.new_page()  # a context without the harness's routing, which blocks file://
        try:
            page.goto(canary.as_uri())
            shown = page.content()
        except Exception as error:  # noqa: BLE001 - a refused navigation is what the sandbox should give
            shown = str(error)
        assert "node secret" not in shown
    finally:
        harness.close()
        canary.unlink()
