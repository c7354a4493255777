"""``vlrl eval``: a run folder, a checkpoint and an endpoint (``vlrl serve``) evaluated on held-out
seeds, each ending with a JSON summary, ``eval.json`` and ``report.md``; the same checkpoint scores
the same on the same seeds through embedded engines and over HTTP, reply for reply."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.running import RunningServer
from vlrl.cli import main
from vlrl.config import AgentBehaviour, DataSource, EnvSettings
from vlrl.job.eval_report import build_report, markdown, rate
from vlrl.job.evaluate import EpisodeRecord, EvalResult
from vlrl.job.run_folder import CHECKPOINTS, STATE_FILE, write_sources

ONE_TURN = ["--set", "sources[0].agent.max_turns=1", "--set", "sources[0].agent.max_tokens=24"]
SMALL_SCREEN = ["--set", "sources[0].env.width=160", "--set", "sources[0].env.height=120"]


def _eval(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(["eval", *argv]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _report(summary: dict) -> dict:
    return json.loads((Path(summary["report"]).parent / "eval.json").read_text())


def test_a_run_folder_is_evaluated_on_its_own_sources_with_its_newest_checkpoint(ray_session, tiny_path, tmp_path, capsys):
    run = tmp_path / "run"
    for step in (1, 2):
        checkpoint = run / CHECKPOINTS / f"step-{step:06d}"
        shutil.copytree(tiny_path, checkpoint / "hf")
        (checkpoint / STATE_FILE).write_text(json.dumps({"step": step}))
    source = DataSource(
        name="clicks",
        codebase="desktop",
        agent=AgentBehaviour(max_turns=1, max_tokens=24, prompt_template="gui-agent-short"),
        env=EnvSettings(width=160, height=120, tasks=["click-target"], params={"distractors": 0}),
    )
    write_sources(run, [source])
    summary = _eval(capsys, str(run), "--episodes", "3", "--screenshots", "1")
    assert summary["processor"] == str(run / CHECKPOINTS / "step-000002" / "hf")
    assert list(summary["sources"]) == ["clicks"]
    assert summary["sources"]["clicks"]["tasks"].keys() == {"click-target"}
    assert summary["episodes_played"] == 3 and summary["store_keys_left"] == 0
    assert 0 <= summary["sources"]["clicks"]["chance"] <= 1
    report = _report(summary)
    assert [e["seed"] for e in report["episodes"]] == [1_000_000, 1_000_001, 1_000_002]
    assert all(len(e["replies"]) == 1 for e in report["episodes"])  # one turn each, decoded
    page = (run / "eval" / "report.md").read_text()
    assert "| clicks | click-target | 3 |" in page and "episodes/" in page
    assert len(list((run / "eval" / "episodes").glob("*.png"))) == 1


def test_a_checkpoint_scores_the_same_on_embedded_engines_and_through_vlrl_serve(ray_session, tiny_path, tmp_path, capsys):
    tasks = ["--harness", "desktop", "--tasks", "click-target", "--episodes", "6", "--no-chance", *ONE_TURN, *SMALL_SCREEN]
    embedded = _eval(capsys, str(tiny_path), "--out", str(tmp_path / "embedded"), "--set", "engine.max_batch=1", *tasks)
    server = RunningServer(tiny_path, engine={"max_batch": 1})
    try:
        served = _eval(capsys, "--endpoint", server.url, "--out", str(tmp_path / "served"), *tasks)
    finally:
        server.close()
    assert served["endpoint"] == server.url and served["processor"] == str(tiny_path)  # the listed model's folder
    assert served["success"] == embedded["success"]
    assert served["sources"]["desktop"]["tasks"] == embedded["sources"]["desktop"]["tasks"]
    ours, theirs = _report(embedded)["episodes"], _report(served)["episodes"]
    assert len({e["replies"] for e in map(_frozen, ours)}) > 1  # the replies depend on the screen: a real comparison
    assert [_frozen(e) for e in ours] == [_frozen(e) for e in theirs]
    for summary in (embedded, served):
        assert Path(summary["report"]).read_text().startswith("# Evaluation of ")


def _frozen(episode: dict) -> dict:
    return {**episode, "replies": tuple(episode["replies"])}


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
