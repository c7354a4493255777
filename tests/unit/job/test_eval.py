"""``vlrl eval`` without an engine: the refusal of a call that names nothing to evaluate, and the
report's rates, standard errors and failure counts. The evaluations themselves are in
tests/e2e/job/test_eval.py."""

from __future__ import annotations

import pytest

from vlrl.cli import main
from vlrl.job.eval_report import build_report, markdown, rate
from vlrl.job.evaluate import EpisodeRecord, EvalResult


def test_vlrl_eval_without_tasks_or_policy_says_what_it_needs(capsys):
    assert main(["eval", "--episodes", "2"]) == 2
    assert "a run folder, a checkpoint folder, or --endpoint URL" in capsys.readouterr().err


def test_the_report_gives_rates_with_standard_errors_per_task_and_counts_failures():
    episodes = [
        EpisodeRecord("s", 0, "a", True, 1.0, 1, 5, "done"),
        EpisodeRecord("s", 1, "a", False, 0.0, 2, 7, "max_turns"),
        EpisodeRecord("s", 2, "b", True, 1.0, 1, 5, "done"),
        EpisodeRecord("s", 3, "", False, 0.0, 0, 0, "failed", "timeout: harness call ran longer than 5 s"),
    ]
    report = build_report(
        EvalResult(episodes=episodes), chance={"s": 0.1}, about={"policy": "p", "seed": 0, "episodes_per_source": 4, "temperature": 0.0}
    )
    source = report["sources"]["s"]
    assert source["episodes"] == 3 and source["failed"] == 1
    assert source["success"] == pytest.approx(2 / 3)
    assert source["stderr"] == pytest.approx(((2 / 3) * (1 / 3) / 3) ** 0.5)
    assert source["tasks"] == {"a": rate([True, False]), "b": rate([True])}
    assert source["failures"] == {"timeout: harness call ran longer than 5 s": 1}
    page = markdown(report)
    assert "| s | a | 2 | 0.500 | 0.354 |" in page and "1 x `timeout: harness call ran longer than 5 s`" in page
