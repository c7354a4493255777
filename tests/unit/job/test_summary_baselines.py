"""The summary's top-level baselines are the run's own (issue 52): a run started with
``start_from`` carries the other run's ``RunState.success`` (its desktop task's chance, best
constant point and oracle), and the summary must not present those as this run's."""

from __future__ import annotations

from types import SimpleNamespace

from examples.train_own_agent import own_agent_source
from vlrl.job.metrics_log import MetricsLog
from vlrl.job.session import RunState
from vlrl.job.train_job import TrainJob, _summary

OTHER_RUN = {"chance": 0.031, "constant": 0.25, "oracle": 1.0, "best": 0.25, "base": 0.0, "warm": 0.266}
"""What a checkpoint of ``train_own_agent.py:warm_start`` holds: its desktop click-target figures."""


def _session(run_dir) -> SimpleNamespace:
    return SimpleNamespace(
        run_dir=run_dir, store=SimpleNamespace(stats=lambda: SimpleNamespace(keys=0)), family=SimpleNamespace(name="qwen2_vl"), lora_push=""
    )


def _eval(log: MetricsLog, tag: str, success: float, source: str = "click-agent") -> None:
    log.log(0, "eval", {"tag": tag, "eval/success": success, f"eval/{source}/success": success})


def test_a_start_from_run_shows_no_baselines_of_the_run_it_started_from(tmp_path):
    config = TrainJob.Config(sources=[own_agent_source()], warm_start=None)
    log = MetricsLog(tmp_path, tensorboard=False)
    _eval(log, "warm", 0.141)
    _eval(log, "final", 0.172)
    state = RunState(policy="warm-start", success={**OTHER_RUN, "warm": 0.141, "final": 0.172})
    summary = _summary(config, state, _session(tmp_path), wall_s=1.0)
    assert (summary["success_first"], summary["success_last"]) == (0.141, 0.172)
    assert summary["success_chance"] is summary["success_constant"] is summary["success_oracle"] is None
    assert summary["sources"]["click-agent"]["chance"] is None and summary["baseline_seeds"] is None


def test_the_run_s_own_baselines_record_gives_the_top_level_figures(tmp_path):
    config = TrainJob.Config(sources=[own_agent_source()], warm_start=None)
    log = MetricsLog(tmp_path, tensorboard=False)
    log.log(0, "eval", {"tag": "baselines", "eval/chance": 0.078, "eval/constant": 0.141, "eval/oracle": 0.9, "eval/baseline_seeds": [1, 64]})
    _eval(log, "warm", 0.141)
    summary = _summary(config, RunState(success=dict(OTHER_RUN)), _session(tmp_path), wall_s=1.0)
    assert (summary["success_chance"], summary["success_constant"], summary["success_oracle"]) == (0.078, 0.141, 0.9)
