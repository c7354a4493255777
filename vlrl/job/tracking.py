"""Experiment trackers beside ``metrics.jsonl``: Weights & Biases and MLflow, each optional.

A tracker is on when it is told where to log (``--set tracking.wandb.project=vlrl``,
``--set tracking.mlflow.experiment=gui-rl``) and gets, through ``MetricsLog``:

1. at the start, the run's config flattened to the paths ``--set`` takes (``optim.lr``);
2. every record the job logs, each number as ``phase/name`` as in TensorBoard (``rl/train/loss``),
   nested figures one level down (``warm-start/demos/dropped/<reason>``). MLflow takes the
   record's step as it is; W&B plots each phase against its own step metric (``rl/step``),
   since a W&B run's step only grows while warm-start, RL and evaluation steps each restart;
3. the ``summary`` record: W&B's run summary, MLflow ``summary/*`` metrics;
4. the end of the run: finished, or failed when the run raised.

Their packages are the ``tracking`` extra (``pip install 'vlrl[tracking]'``); a tracker turned
on without its package is refused when the config is validated, before anything starts.
A resumed run (``--resume``) continues the same tracker runs: their ids are kept in
``RUN_DIR/tracking.json``. W&B keeps its files under ``RUN_DIR/wandb`` (``mode='offline'``: only
there, for ``wandb sync`` later); MLflow logs to ``tracking_uri``, by default a SQLite file in the
run folder.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from vlrl.config import ConfigError, NonEmpty, config_name, is_config
from vlrl.config.schema import join_path

IDS_FILE = "tracking.json"
"""The tracker runs' ids, for a resumed run to continue them."""
SUMMARY_PHASE = "summary"
INSTALL = "pip install 'vlrl[tracking]'"


class Tracker(Protocol):
    """One run in one experiment tracker, as ``MetricsLog`` drives it."""

    id: str
    """The tracker's own id of the run (kept in ``IDS_FILE``)."""

    def log(self, step: int, phase: str, values: Mapping[str, float | str]) -> None:
        """One record: flat names, numbers and strings (a tracker keeps what it can plot)."""

    def close(self, *, failed: bool) -> None:
        """End the run: finished, or failed when the job raised."""


class WandbTracker:
    """A W&B run; each phase has its own x-axis, ``phase/step``."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """Weights & Biases (the ``wandb`` package)."""

        project: Annotated[str, NonEmpty()] | None = None
        """W&B project to log to; None: no W&B."""

        entity: str | None = None
        """Team or user that owns the project; None: the logged-in user's default."""

        name: str | None = None
        """The run's display name; None: the run folder's name."""

        tags: list[str] = field(default_factory=list)
        """Tags of the run."""

        mode: Literal["online", "offline"] = "online"
        """'offline': the run is only written under RUN_DIR/wandb (upload it with ``wandb sync``)."""

        def check(self) -> None:
            if self.project is not None:
                _require("project", self.project, "W&B", ["wandb"])

    def __init__(self, config: WandbTracker.Config, run_dir: Path, params: dict[str, Any], run_id: str | None) -> None:
        import wandb

        self.run = wandb.init(
            project=config.project, entity=config.entity, name=config.name or run_dir.name, tags=config.tags,
            mode=config.mode, dir=run_dir, id=run_id, resume="allow" if run_id else None,
        )  # fmt: skip
        self.run.config.update(params, allow_val_change=True)  # a resume may change some
        self.id = self.run.id
        self._phases: set[str] = set()

    def log(self, step: int, phase: str, values: Mapping[str, float | str]) -> None:
        if phase == SUMMARY_PHASE:
            self.run.summary.update(dict(values))
            return
        if phase not in self._phases:
            self.run.define_metric(f"{phase}/step")
            self.run.define_metric(f"{phase}/*", step_metric=f"{phase}/step")
            self._phases.add(phase)
        numbers = {f"{phase}/{name}": v for name, v in values.items() if not isinstance(v, str)}
        self.run.log({**numbers, f"{phase}/step": step})

    def close(self, *, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


class MlflowTracker:
    """An MLflow run, through ``MlflowClient`` (no process-wide active run)."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """MLflow (the ``mlflow-skinny`` package, or ``mlflow``)."""

        experiment: Annotated[str, NonEmpty()] | None = None
        """MLflow experiment to log to (created when missing); None: no MLflow."""

        tracking_uri: str | None = None
        """Where the runs are kept (``http://host:5000``, ``sqlite:///path.db``, ``databricks``); None:
        ``MLFLOW_TRACKING_URI`` when set, else ``sqlite:///RUN_DIR/mlflow.db``."""

        run_name: str | None = None
        """The run's name; None: the run folder's name."""

        tags: dict[str, str] = field(default_factory=dict)
        """Tags of the run."""

        def uri(self, run_dir: Path) -> str:
            """The tracking URI of a run in ``run_dir``."""
            return self._given_uri() or f"sqlite:///{run_dir / 'mlflow.db'}"

        def _given_uri(self) -> str | None:
            return self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")

        def check(self) -> None:
            if self.experiment is not None:
                sqlite = (self._given_uri() or "sqlite:").startswith("sqlite:")  # MLflow's SQL store needs both
                _require(
                    "experiment", self.experiment, "MLflow", ["mlflow", *(["sqlalchemy", "alembic"] if sqlite else [])]
                )

    def __init__(self, config: MlflowTracker.Config, run_dir: Path, params: dict[str, Any], run_id: str | None) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=config.uri(run_dir))
        if run_id is not None:
            self.id = run_id
            self.client.update_run(run_id, status="RUNNING")
            return  # parameters are immutable in MLflow: a resumed run keeps its first ones
        experiment = self.client.get_experiment_by_name(config.experiment)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(config.experiment)
        run = self.client.create_run(experiment_id, run_name=config.run_name or run_dir.name, tags=config.tags)
        self.id = run.info.run_id
        self.client.log_batch(self.id, params=[Param(_mlflow_key(k), str(v)[:6000]) for k, v in params.items()])

    def log(self, step: int, phase: str, values: Mapping[str, float | str]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        numbers = {_mlflow_key(f"{phase}/{name}"): float(v) for name, v in values.items() if not isinstance(v, str)}
        if numbers:
            self.client.log_batch(self.id, metrics=[Metric(key, v, now, step) for key, v in numbers.items()])

    def close(self, *, failed: bool) -> None:
        self.client.set_terminated(self.id, status="FAILED" if failed else "FINISHED")


@dataclass(kw_only=True, slots=True)
class Tracking:
    """Experiment trackers the run's metrics also go to (metrics.jsonl is written regardless)."""

    wandb: WandbTracker.Config = field(default_factory=WandbTracker.Config)
    """Weights & Biases: on when ``wandb.project`` is set."""

    mlflow: MlflowTracker.Config = field(default_factory=MlflowTracker.Config)
    """MLflow: on when ``mlflow.experiment`` is set."""

    def start(self, run_dir: Path, run_config: Any) -> list[Tracker]:
        """Open a run in each tracker that is on (the one ``IDS_FILE`` names, if any), with
        ``run_config`` flattened as its parameters."""
        ids_file = Path(run_dir) / IDS_FILE
        ids = json.loads(ids_file.read_text()) if ids_file.exists() else {}
        params = flat_config(run_config)
        wanted = [
            ("wandb", WandbTracker, self.wandb, self.wandb.project is not None),
            ("mlflow", MlflowTracker, self.mlflow, self.mlflow.experiment is not None),
        ]
        trackers: dict[str, Tracker] = {}
        try:
            for name, kind, config, on in wanted:
                if on:
                    trackers[name] = kind(config, Path(run_dir), params, ids.get(name))
        except BaseException:
            for tracker in trackers.values():
                tracker.close(failed=True)
            raise
        if trackers:
            ids_file.write_text(json.dumps({name: tracker.id for name, tracker in trackers.items()}))
        return list(trackers.values())


def flat_config(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """A config tree as ``{path: value}``, the paths ``--set`` takes (``sources[0].codebase``);
    a config-valued field also names its config (``store: 'RayStore'``), as ``--print-config`` does."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value, path = getattr(cfg, f.name), join_path(prefix, f.name)
        if is_config(value):
            out[path] = config_name(type(value))
            out.update(flat_config(value, path))
        elif isinstance(value, (list, tuple)) and value and all(map(is_config, value)):
            for i, item in enumerate(value):
                out.update(flat_config(item, f"{path}[{i}]"))
        else:
            out[path] = value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
    return out


def flat_values(record: Mapping[str, Any], prefix: str = "") -> dict[str, float | str]:
    """The numbers and strings of a record, nested dicts flattened with ``/`` (None and bools left out)."""
    out: dict[str, float | str] = {}
    for name, value in record.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping):
            out.update(flat_values(value, f"{key}/"))
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            out[key] = value
    return out


def _require(field_name: str, value: str, tracker: str, modules: list[str]) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            field_name,
            value,
            f"the {' and '.join(missing)} package{'s' if len(missing) > 1 else ''} installed to log to {tracker}",
            hint=f"install the tracking extra ({INSTALL}) or set the field to none",
        )


def _mlflow_key(name: str) -> str:
    """A name MLflow accepts: letters, digits and ``_-. :/``, a normalised path of at most 250
    characters (``sources[0].x`` -> ``sources.0.x``; a dropped demonstration's reason may hold anything)."""
    name = re.sub(r"[^\w\-. :/]", "_", re.sub(r"\[(\d+)\]", r".\1", name))
    return "/".join("__" if part == ".." else part for part in name.split("/") if part not in ("", "."))[:250]
