"""The layout of a ``vlrl train`` run folder that outlives the run: its checkpoints, and the
data sources it trained on (what ``vlrl eval RUN_DIR`` evaluates the policy on)."""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vlrl.atomic import fsync, write_bytes_atomic
from vlrl.config import AgentBehaviour, DataSource, EnvSettings

CHECKPOINTS = "checkpoints"
STATE_FILE = "state.json"
"""Written last into a checkpoint folder: a folder without it is incomplete."""
FILES_KEY = "files"
"""The ``state.json`` field listing the folder's other files and their sizes."""
SUMMARY_FILE = "summary.json"
"""The run's JSON summary, written at its end."""
SOURCES_FILE = "sources.json"
"""The run's data sources, written at its start."""
EVALUATION_FILE = "evaluation.json"
"""The run's held-out evaluation settings (episodes, seed, ...), written at its start: ``vlrl eval
RUN_DIR`` plays the same episodes on the same seeds, so one checkpoint gets one figure."""


class BrokenCheckpoint(Exception):
    """A checkpoint folder that is never resumed from; the message says which and why."""


def write_checkpoint_state(checkpoint: Path, state: Mapping[str, Any]) -> None:
    """``state.json``, last and atomically: ``state`` plus the size of every other file of the
    folder, so ``read_checkpoint_state`` tells an intact checkpoint from one whose files went
    missing or were cut short since."""
    paths = [p for p in sorted(checkpoint.rglob("*")) if p.is_file() and p != checkpoint / STATE_FILE]
    files = {p.relative_to(checkpoint).as_posix(): p.stat().st_size for p in paths}
    write_bytes_atomic(checkpoint / STATE_FILE, json.dumps({**state, FILES_KEY: files}, indent=2).encode())
    fsync(checkpoint.parent)  # the checkpoint folder's own entry


def read_checkpoint_state(checkpoint: Path) -> dict[str, Any]:
    """A checkpoint's state (without its file list), checked against the folder:
    ``BrokenCheckpoint`` when ``state.json`` is missing, torn or not a state, or a file it lists
    is missing or has another size."""
    try:
        state = json.loads((checkpoint / STATE_FILE).read_bytes())
    except FileNotFoundError:
        raise BrokenCheckpoint(f"{checkpoint}: no {STATE_FILE} (the save did not finish)") from None
    except (OSError, ValueError) as e:  # ValueError: JSON and UTF-8 decoding errors
        raise BrokenCheckpoint(f"{checkpoint}: unreadable {STATE_FILE} ({e})") from None
    if not isinstance(state, dict) or type(state.get("step")) is not int:
        raise BrokenCheckpoint(f"{checkpoint}: {STATE_FILE} is not a checkpoint state (an object with an int 'step')")
    files = state.pop(FILES_KEY, {})  # absent in a state written before files were listed
    if not isinstance(files, dict):
        raise BrokenCheckpoint(f"{checkpoint}: {STATE_FILE} field {FILES_KEY!r} is not an object")
    for name, size in files.items():
        path = checkpoint / name
        if not path.is_file():
            raise BrokenCheckpoint(f"{checkpoint}: {name} is missing")
        if path.stat().st_size != size:
            raise BrokenCheckpoint(f"{checkpoint}: {name} has {path.stat().st_size} bytes, {STATE_FILE} says {size}")
    return state


def newest_checkpoint(run_dir: Path) -> Path | None:
    """The newest intact checkpoint of a run (an RL step's before the warm start's), or None; a
    broken one is skipped with a warning that says why, so a run resumes from the one before."""
    folder = run_dir / CHECKPOINTS
    steps: dict[Path, int] = {}
    for checkpoint in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not checkpoint.is_dir():
            continue
        try:
            steps[checkpoint] = read_checkpoint_state(checkpoint)["step"]
        except BrokenCheckpoint as e:
            warnings.warn(f"{e}; skipped", stacklevel=2)
    return max(steps, key=lambda p: (steps[p], p.name.startswith("step-")), default=None)


def write_sources(run_dir: Path, sources: list[DataSource]) -> None:
    (run_dir / SOURCES_FILE).write_text(json.dumps([dataclasses.asdict(s) for s in sources], indent=2))


def read_sources(run_dir: Path) -> list[DataSource]:
    """The data sources a run trained on (``FileNotFoundError`` for a folder without them)."""
    sources = []
    for entry in json.loads((run_dir / SOURCES_FILE).read_text()):
        agent, env = AgentBehaviour(**entry.pop("agent")), EnvSettings(**entry.pop("env"))
        sources.append(DataSource(**entry, agent=agent, env=env))
    return sources


def write_evaluation(run_dir: Path, evaluation: Any) -> None:
    """``evaluation`` (the run's ``Evaluation``) as ``evaluation.json``."""
    (run_dir / EVALUATION_FILE).write_text(json.dumps(dataclasses.asdict(evaluation), indent=2))


def read_evaluation(run_dir: Path) -> dict[str, Any] | None:
    """The evaluation settings a run recorded, or None (a run from before they were recorded)."""
    path = run_dir / EVALUATION_FILE
    return json.loads(path.read_text()) if path.exists() else None
