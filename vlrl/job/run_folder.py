"""The layout of a ``vlrl train`` run folder that outlives the run: its checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

CHECKPOINTS = "checkpoints"
STATE_FILE = "state.json"
"""Written last into a checkpoint folder: a folder without it is incomplete."""
SUMMARY_FILE = "summary.json"
"""The run's JSON summary, written at its end."""


def newest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run (an RL step's before the warm start's), or None."""
    folder = run_dir / CHECKPOINTS
    complete = [p.parent for p in folder.glob(f"*/{STATE_FILE}")] if folder.is_dir() else []
    if not complete:
        return None
    return max(complete, key=lambda p: (json.loads((p / STATE_FILE).read_text())["step"], p.name.startswith("step-")))
