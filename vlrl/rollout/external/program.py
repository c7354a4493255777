"""Running one episode of an agent program: its process, its time limit, its reward.

The program is started in a session of its own (so a kill reaches every process it spawned),
with the endpoint and the episode in its environment, and waited for up to ``time_limit_s``.
It reports its reward on the last non-empty line of stdout: a number, or a JSON object
``{"reward": r, "success": b}`` (success defaults to ``reward > 0``). Each way a run can go
wrong raises ``AgentFailed`` with a reason of its own kind: the program crashed (a non-zero
exit, with the end of its stderr), hung (killed at the time limit), or printed garbage where
the reward belongs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import sys
from dataclasses import dataclass

from vlrl.config import ExternalAgent

_TAIL_BYTES = 2000
"""The end of stderr kept for a crash's reason."""

_CALL = (
    "import importlib, json, sys\n"
    "module, function = sys.argv[1].split(':')\n"
    "reward = getattr(importlib.import_module(module), function)(task=sys.argv[2], seed=int(sys.argv[3]))\n"
    "print(json.dumps(reward))\n"
)
"""How an ``entry`` runs: imported and called in a fresh interpreter, its return value printed."""


class AgentFailed(RuntimeError):
    """The agent program's run cannot be trained; the message says how it failed."""


@dataclass(frozen=True, slots=True)
class AgentReport:
    reward: float
    success: bool


def argv(agent: ExternalAgent, *, task: str, seed: int) -> list[str]:
    """The program's command line for one episode."""
    if agent.entry:
        return [sys.executable, "-c", _CALL, agent.entry, task, str(seed)]
    return [arg.replace("{task}", task).replace("{seed}", str(seed)) for arg in agent.command]


async def run_program(agent: ExternalAgent, *, task: str, seed: int, env: dict[str, str]) -> AgentReport:
    """Run the program once to its end (or its time limit) and read its reward."""
    command = argv(agent, task=task, seed=seed)
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **agent.env, **env},
            cwd=agent.cwd,
            start_new_session=True,
        )
    except OSError as error:
        raise AgentFailed(f"agent did not start: {command[0]!r}: {error}") from None
    try:
        out, err = await asyncio.wait_for(process.communicate(), agent.time_limit_s)
    except asyncio.TimeoutError:
        raise AgentFailed(f"agent hung: ran past its time limit of {agent.time_limit_s:g} s and was killed") from None
    finally:  # a timeout, or the run cancelled (its tenant timed out): nothing of the program outlives it
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await asyncio.shield(process.wait())
    if process.returncode != 0:
        tail = err[-_TAIL_BYTES:].decode(errors="replace").strip().splitlines()
        last = tail[-1] if tail else "no stderr"
        raise AgentFailed(f"agent crashed: exit status {process.returncode}; its stderr ends: {last}")
    return parse_report(out.decode(errors="replace"))


def parse_report(stdout: str) -> AgentReport:
    """The reward on the last non-empty line of ``stdout``."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    try:
        value = json.loads(last)
    except ValueError:
        value = None
    success = None
    if isinstance(value, dict):
        value, success = value.get("reward"), value.get("success")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        shown = last if len(last) <= 80 else last[:77] + "..."
        raise AgentFailed(
            f"agent's reward is garbage: its last stdout line {shown!r} is not a finite number or"
            ' {"reward": <number>, "success": <bool>}'
        )
    if success is not None and not isinstance(success, bool):
        raise AgentFailed(f"agent's reward is garbage: success is {success!r}, not true or false")
    return AgentReport(float(value), bool(value > 0) if success is None else success)
