"""A hostile agent in the xdesktop terminal, through the Harness Pool: every case is a real
episode whose typed line attacks the node from the sandbox.

Each line runs ``ATTACK`` and, only if the attack failed inside, the task's own command
(``terminal-run-save``): the episode succeeds exactly when the sandbox held. The host is then
checked directly (no file written, the canary unread, the listener unreached, the host's
processes alive), and the attacks that hit a limit (fork bomb, memory) must end as counted
failures naming the limit, with the pool running the next episode on a fresh instance.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from harnesses.xdesktop import XDesktopHarness
from vlrl.harness import Action
from vlrl.pool import HarnessPool, HostBudget, HostConfig, ScriptedEpisode, TenantContext

CHECKOUT = Path(__file__).resolve().parents[4]
SETTINGS = {
    "width": 640, "height": 480, "tasks": ["terminal-run-save"], "max_steps": 16, "guard_actions": False,
    "sandbox_memory_mb": 256, "sandbox_processes": 64, "sandbox_disk_mb": 32,
}  # fmt: skip


@dataclass(frozen=True)
class Attack:
    """Reset, then type ``if ATTACK; then :; else <the task's command>; fi`` (the sandbox held
    iff the episode succeeds), then wait a second at a time until the episode ends: a loaded
    machine may take seconds to run the line, and a limit hit is checked after every step."""

    seed: int
    attack: str

    async def run(self, ctx: TenantContext) -> bool:
        env = await ctx.open_env()
        await env.reset(seed=self.seed, options={"task": "terminal-run-save"})
        solve = (await env.oracle()).text.rstrip("\n")
        _, _, terminated, truncated, info = await env.step(Action.type(f"if {self.attack}; then :; else {solve}; fi\n"))
        while not (terminated or truncated):
            _, _, terminated, truncated, info = await env.step(Action.wait(1.0))
        return bool(info["success"])


@pytest.fixture(scope="module")
def pool(ray_session):
    pool = HarnessPool.Config(
        budget=HostBudget(total_hosts=2, shares={"loop": 1, "xdesktop": 1}),
        loop_host=HostConfig(max_tenants=8),
        env_host=HostConfig(max_tenants=2, threads=2),
        max_attempts=1,
    ).build()
    yield pool
    pool.shutdown()


def _play(pool, *tenants):
    jobs = [(tenant, {"codebase": "xdesktop", "env_settings": SETTINGS}) for tenant in tenants]
    return asyncio.run(pool.run_many(jobs))


def test_a_line_typed_in_the_terminal_writes_nothing_on_the_host(pool, tmp_path):
    targets = [Path("/root") / f"escaped-{uuid.uuid4().hex}", CHECKOUT / f"escaped-{uuid.uuid4().hex}",
               tmp_path / "escaped", Path("/etc") / f"escaped-{uuid.uuid4().hex}",
               Path.home() / ".ray" / f"escaped-{uuid.uuid4().hex}"]  # fmt: skip
    writes = " || ".join(f"(id > {t}) 2>/dev/null" for t in targets)
    ls_root = "[ -e /root ] || [ -e /work ] || [ -e /home ] || [ $(id -u) = 0 ] || grep -q 'CapEff:.*[1-9a-f]' /proc/self/status"
    [wrote, saw] = _play(pool, Attack(1, writes), Attack(2, ls_root))
    assert wrote.status == "ok" and wrote.value is True, wrote
    assert saw.status == "ok" and saw.value is True, saw  # uid not 0, no capability, no /root, /home, checkout
    assert not any(t.exists() for t in targets)


def test_the_nodes_secrets_processes_and_displays_are_out_of_reach(pool):
    canary = Path("/root") / f".vlrl-canary-{uuid.uuid4().hex}"
    canary.write_text("secret")
    canary.chmod(0o600)
    other = XDesktopHarness(width=640, height=480)  # a second desktop on this node, display :1xx
    try:
        display = other._session.display
        reads = (f"cat {canary} 2>/dev/null || ls /tmp/ray/session_latest 2>/dev/null"
                 " || grep -qs RAY_ /proc/[0-9]*/environ")  # fmt: skip
        signals = f"kill -0 {os.getpid()} 2>/dev/null || ls /proc | grep -qx {os.getpid()}"
        displays = f"xdpyinfo -display {display} >/dev/null 2>&1 || DISPLAY={display} xdotool getmouselocation >/dev/null 2>&1"
        outcomes = _play(pool, Attack(3, reads), Attack(4, signals), Attack(5, displays))
        assert [(o.status, o.value) for o in outcomes] == [("ok", True)] * 3, outcomes
        assert canary.read_text() == "secret" and other._session.processes()
    finally:
        other.close()
        canary.unlink()


def test_the_nodes_loopback_services_are_unreachable(pool, ray_session):
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    gcs_port = ray_session.get_runtime_context().gcs_address.rsplit(":", 1)[1]
    ports = [listener.getsockname()[1], int(gcs_port)]
    connects = " || ".join(f"(echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null" for port in ports)
    [outcome] = _play(pool, Attack(6, connects))
    listener.close()
    assert (outcome.status, outcome.value) == ("ok", True), outcome
    assert accepted == []


def test_filling_the_disk_fills_only_the_instances_box(pool):
    # The file is removed again before the task's command runs: that needs room in the box too.
    fill = "dd if=/dev/zero of=~/fill bs=1M count=200 2>/dev/null; s=$(stat -c %s ~/fill); rm ~/fill; [ $s -ge 100000000 ]"
    [outcome] = _play(pool, Attack(7, fill))
    assert (outcome.status, outcome.value) == ("ok", True), outcome  # dd stopped at the 32 MiB box


@pytest.mark.parametrize(
    ("attack", "limit"),
    [
        ("(for i in $(seq 200); do sleep 30 & done) 2>/dev/null", "processes"),
        ("head -c 600m /dev/zero | tail > /dev/null", "memory"),  # tail holds its one 600 MiB line
    ],
    ids=["fork-bomb", "memory"],
)
def test_a_limit_hit_is_a_counted_failure_and_the_pool_goes_on(pool, attack, limit):
    failed_before = pool.book.failed
    [hit] = _play(pool, Attack(8, attack))
    assert hit.status == "failed" and f"sandbox {limit} limit hit" in hit.error, hit
    assert pool.book.failed == failed_before + 1 and pool.book.balanced()
    [after] = _play(pool, ScriptedEpisode(seed=9, task="terminal-run-save", max_steps=4))
    assert after.status == "ok" and after.value.success
