"""Metrics of a run: one JSON line per record in ``RUN_DIR/metrics.jsonl``, and TensorBoard.

A record is ``{"step": n, "phase": "rl", "time_s": t, ...}`` with flat ``/``-separated metric
names (``train/loss``, ``rollout/desktop-click/success``, ``eval/success``). The JSONL file is
the source of truth (``vlrl plot`` reads it back); TensorBoard event files under ``RUN_DIR/tb``
mirror every numeric metric, tagged ``phase/name``, when the ``tensorboard`` package is
installed. A resumed run appends to both. Experiment trackers (W&B, MLflow: ``tracking``) get
every record too, with its step, and are finished (or marked failed) by ``close``.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from vlrl.job.tracking import Tracker, flat_values

METRICS_FILE = "metrics.jsonl"
REVERTED_FILE = "metrics.reverted.jsonl"
REWOUND_PHASES = ("rl", "eval")
TB_DIR = "tb"


class MetricsLog:
    def __init__(
        self, run_dir: str | Path, *, tensorboard: bool = True, fresh: bool = False, trackers: Sequence[Tracker] = ()
    ) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fresh:
            self.path.unlink(missing_ok=True)
        self._file = self.path.open("a", encoding="utf-8")
        self._start = time.time()
        self._offset = last_time(self.path)  # a resumed run continues the clock
        self.writer = _tensorboard_writer(Path(run_dir) / TB_DIR) if tensorboard else None
        self.trackers = list(trackers)

    @property
    def tensorboard(self) -> bool:
        return self.writer is not None

    def log(self, step: int, phase: str, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Append one record; non-finite numbers become null in JSON and are skipped by TensorBoard
        and the trackers."""
        record: dict[str, Any] = {"step": int(step), "phase": phase, "time_s": round(self.elapsed(), 3)}
        for name, value in metrics.items():
            record[name] = _jsonable(value)
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self.writer is not None:
            for name, value in record.items():
                if name not in ("step", "phase") and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(f"{phase}/{name}", value, global_step=step)
            self.writer.flush()
        if self.trackers:
            values = flat_values({k: v for k, v in record.items() if k not in ("step", "phase")})
            for tracker in self.trackers:
                tracker.log(int(step), phase, values)
        return record

    def rewind(self, step: int) -> int:
        """A run resumed from the checkpoint of RL step ``step``: the RL and evaluation records of
        later steps describe training the checkpoint never saw (a crash lost it), so they move to
        ``metrics.reverted.jsonl`` and the steps that are trained again are logged once. Returns
        how many records moved."""
        records = list(_records(self.path))
        later = [r for r in records if r.get("phase") in REWOUND_PHASES and r.get("step", 0) > step]
        if later:
            with (self.path.parent / REVERTED_FILE).open("a", encoding="utf-8") as reverted:
                reverted.writelines(json.dumps(r) + "\n" for r in later)
            kept = [r for r in records if not (r.get("phase") in REWOUND_PHASES and r.get("step", 0) > step)]
            self._file.close()
            self.path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
            self._file = self.path.open("a", encoding="utf-8")
        return len(later)

    def elapsed(self) -> float:
        return self._offset + time.time() - self._start

    def close(self, *, failed: bool = False) -> None:
        """``failed``: the run raised; trackers mark their runs failed. Every tracker is closed
        even when another one's close raises."""
        with contextlib.ExitStack() as closing:
            for tracker in self.trackers:
                closing.callback(tracker.close, failed=failed)
            self._file.close()
            if self.writer is not None:
                self.writer.close()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every record of ``RUN_DIR/metrics.jsonl`` in order (a torn last line is skipped)."""
    return list(_records(Path(run_dir) / METRICS_FILE))


def last_time(path: Path) -> float:
    times = [r.get("time_s") or 0.0 for r in _records(path)]
    return float(times[-1]) if times else 0.0


def _records(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # a run killed mid-write leaves a partial line


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy / torch scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _tensorboard_writer(path: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # the tensorboard package is missing: JSONL only
        return None
    return SummaryWriter(log_dir=str(path))
