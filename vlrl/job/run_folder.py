"""The layout of a ``vlrl train`` run folder that outlives the run: its checkpoints, and the
data sources it trained on (what ``vlrl eval RUN_DIR`` evaluates the policy on)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from vlrl.config import AgentBehaviour, DataSource, EnvSettings

CHECKPOINTS = "checkpoints"
STATE_FILE = "state.json"
"""Written last into a checkpoint folder: a folder without it is incomplete."""
SUMMARY_FILE = "summary.json"
"""The run's JSON summary, written at its end."""
SOURCES_FILE = "sources.json"
"""The run's data sources, written at its start."""


def newest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run (an RL step's before the warm start's), or None."""
    folder = run_dir / CHECKPOINTS
    complete = [p.parent for p in folder.glob(f"*/{STATE_FILE}")] if folder.is_dir() else []
    if not complete:
        return None
    return max(complete, key=lambda p: (json.loads((p / STATE_FILE).read_text())["step"], p.name.startswith("step-")))


def write_sources(run_dir: Path, sources: list[DataSource]) -> None:
    (run_dir / SOURCES_FILE).write_text(json.dumps([dataclasses.asdict(s) for s in sources], indent=2))


def read_sources(run_dir: Path) -> list[DataSource]:
    """The data sources a run trained on (``FileNotFoundError`` for a folder without them)."""
    sources = []
    for entry in json.loads((run_dir / SOURCES_FILE).read_text()):
        agent, env = AgentBehaviour(**entry.pop("agent")), EnvSettings(**entry.pop("env"))
        sources.append(DataSource(**entry, agent=agent, env=env))
    return sources
