"""Experiment trackers: what ``MetricsLog`` logs reads back through W&B's own reader of its offline
run files and through ``MlflowClient``, with the steps, the flattened config, the summary, the
end state (failed when the run raised, also inside a ``JobSession``), resume, and the error when
a tracker's package is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlrl.config import ConfigError, apply_overrides
from vlrl.job.metrics_log import MetricsLog
from vlrl.job.session import JobSession
from vlrl.job.tracking import IDS_FILE
from vlrl.job.train_job import TrainJob

WANDB = ["tracking.wandb.project=vlrl-test", "tracking.wandb.mode=offline"]
MLFLOW = ["tracking.mlflow.experiment=vlrl-test"]


@pytest.fixture(autouse=True)
def _local_only(monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)


def _config(run_dir: Path, *overrides: str) -> TrainJob.Config:
    return apply_overrides(TrainJob.Config(), [f"run_dir={run_dir}", "optim.lr=0.0025", *overrides])


def _log_a_run(config: TrainJob.Config, *, failed: bool = False) -> None:
    run_dir = Path(config.run_dir)
    log = MetricsLog(run_dir, tensorboard=False, trackers=config.tracking.start(run_dir, config))
    log.log(0, "eval", {"tag": "base", "eval/success": 0.25})
    for step in (1, 2):
        dropped = {"missed": 3, "failed: OSError: see http://host//x": 1}  # a reason may hold anything
        log.log(step, "warm-start", {"train/loss": 2.0 / step, "demos/dropped": dropped})
    for step in (1, 2, 3):
        log.log(step, "rl", {"train/loss": 1.0 / step, "train/nan": float("nan"), "groups/ok": True})
    log.log(
        3, "summary", {"success_last": 0.5, "model_family": "qwen2_vl", "sources": {"desktop": {"success_last": 0.5}}}
    )
    log.close(failed=failed)


def _wandb_inspect(run_dir: Path, *args: str) -> str:
    (run_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    done = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", *args, str(run_file)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return done.stdout


def _mlflow(run_dir: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("vlrl-test")
    return client, client.search_runs([experiment.experiment_id])


def test_wandb_offline_run_holds_every_record_against_its_phase_step(tmp_path):
    pytest.importorskip("wandb")
    config = _config(tmp_path, *WANDB)
    _log_a_run(config)
    records = [json.loads(line) for line in _wandb_inspect(tmp_path).splitlines()]
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    rl = [(h["rl/step"], h["rl/train/loss"]) for h in history if "rl/step" in h]
    assert rl == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    warm = [
        (h["warm-start/step"], h["warm-start/train/loss"], h["warm-start/demos/dropped/missed"])
        for h in history
        if "warm-start/step" in h
    ]
    assert warm == [(1, 2.0, 3), (2, 1.0, 3)]
    assert [(h["eval/step"], h["eval/eval/success"]) for h in history if "eval/step" in h] == [(0, 0.25)]
    assert not any("rl/train/nan" in h or "rl/groups/ok" in h or "eval/tag" in h for h in history)
    axes = {
        r["metric"]["glob_name"]: r["metric"]["step_metric"]
        for r in records
        if r["type"] == "metric" and "glob_name" in r["metric"]
    }
    assert axes == {"eval/*": "eval/step", "warm-start/*": "warm-start/step", "rl/*": "rl/step"}  # W&B's x-axes

    run = json.loads(_wandb_inspect(tmp_path, "--summary"))
    assert run["state"] == "finished" and run["project"] == "vlrl-test" and run["name"] == tmp_path.name
    assert run["config"]["optim.lr"] == 0.0025 and run["config"]["store"] == "RayStore"
    assert run["config"]["sources[0].codebase"] == "desktop"
    assert run["summary"]["success_last"] == 0.5 and run["summary"]["model_family"] == "qwen2_vl"
    assert run["summary"]["sources/desktop/success_last"] == 0.5
    assert json.loads((tmp_path / IDS_FILE).read_text()) == {"wandb": run["run_id"]}


def test_wandb_run_of_a_failed_job_is_marked_failed(tmp_path):
    pytest.importorskip("wandb")
    _log_a_run(_config(tmp_path, *WANDB), failed=True)
    assert json.loads(_wandb_inspect(tmp_path, "--summary"))["state"] == "failed"


def test_mlflow_run_holds_every_metric_with_its_step_and_the_flat_config(tmp_path):
    pytest.importorskip("mlflow")
    _log_a_run(_config(tmp_path, *MLFLOW))
    client, (run,) = _mlflow(tmp_path)
    history = client.get_metric_history(run.info.run_id, "rl/train/loss")
    assert [(m.step, m.value) for m in history] == [(1, 1.0), (2, 0.5), (3, pytest.approx(1 / 3))]
    warm = client.get_metric_history(run.info.run_id, "warm-start/demos/dropped/missed")
    assert [(m.step, m.value) for m in warm] == [(1, 3.0), (2, 3.0)]
    assert client.get_metric_history(run.info.run_id, "warm-start/demos/dropped/failed: OSError: see http:/host/x")
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "eval/eval/success")] == [(0, 0.25)]
    assert run.data.metrics["summary/success_last"] == 0.5
    assert run.data.metrics["summary/sources/desktop/success_last"] == 0.5
    assert "rl/train/nan" not in run.data.metrics and "rl/groups/ok" not in run.data.metrics
    assert run.data.params["optim.lr"] == "0.0025" and run.data.params["sources.0.codebase"] == "desktop"
    assert run.info.status == "FINISHED" and run.info.run_name == tmp_path.name


def test_a_resumed_run_continues_the_same_mlflow_run(tmp_path):
    pytest.importorskip("mlflow")
    _log_a_run(_config(tmp_path, *MLFLOW))
    config = _config(tmp_path, *MLFLOW, "steps=4")  # a resume may change the config
    log = MetricsLog(tmp_path, tensorboard=False, trackers=config.tracking.start(tmp_path, config))
    log.log(4, "rl", {"train/loss": 0.25})
    log.close()
    client, (run,) = _mlflow(tmp_path)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "rl/train/loss")] == [1, 2, 3, 4]
    assert run.info.status == "FINISHED"


def test_a_job_that_raises_marks_its_tracker_runs_failed(tmp_path, monkeypatch):
    """Inside ``JobSession``: the trackers start with the session and end with it, also on an error."""
    pytest.importorskip("mlflow")

    def start(session: JobSession) -> None:  # no rollout runtime: __exit__ ends the trackers alone
        pass

    monkeypatch.setattr(JobSession, "_start", start)
    config = _config(tmp_path, *MLFLOW)
    with pytest.raises(RuntimeError, match="a step failed"), JobSession(config, config.plan()) as session:
        session.log.log(1, "rl", {"train/loss": 0.5})
        raise RuntimeError("a step failed")
    client, (run,) = _mlflow(tmp_path)
    assert run.info.status == "FAILED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "rl/train/loss")] == [1]


def test_a_session_that_fails_to_start_closes_its_trackers(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")

    def start(session: JobSession) -> None:
        raise OSError("no engine")

    monkeypatch.setattr(JobSession, "_start", start)
    with pytest.raises(OSError, match="no engine"):
        config = _config(tmp_path, *MLFLOW)
        JobSession(config, config.plan()).__enter__()
    assert _mlflow(tmp_path)[1][0].info.status == "FAILED"


def test_trackers_are_off_by_default(tmp_path):
    config = _config(tmp_path)
    assert config.tracking.start(tmp_path, config) == []
    assert not (tmp_path / IDS_FILE).exists()


@pytest.mark.parametrize(
    ("overrides", "missing", "field"),
    [
        (WANDB, "wandb", "tracking.wandb.project"),
        (MLFLOW, "mlflow", "tracking.mlflow.experiment"),
        (MLFLOW, "sqlalchemy", "tracking.mlflow.experiment"),  # the default SQLite store needs it
    ],
)
def test_a_tracker_without_its_package_is_refused_naming_the_field_and_the_extra(
    tmp_path, monkeypatch, overrides, missing, field
):
    monkeypatch.setitem(sys.modules, missing, None)  # find_spec answers None: not installed
    with pytest.raises(ConfigError) as caught:
        _config(tmp_path, *overrides)
    assert caught.value.path == field
    assert missing in str(caught.value) and "pip install 'vlrl[tracking]'" in str(caught.value)
