"""``vlrl eval``: a run folder (the session's canonical run), a checkpoint and an endpoint
(``vlrl serve``) evaluated on held-out seeds, each ending with a JSON summary, ``eval.json`` and
``report.md``; the same checkpoint scores the same on the same seeds through embedded engines and
over HTTP, reply for reply. What needs no engine is in tests/unit/job/test_eval.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.helpers.running import RunningServer
from vlrl.cli import main
from vlrl.job.run_folder import CHECKPOINTS

ONE_TURN = ["--set", "sources[0].agent.max_turns=1", "--set", "sources[0].agent.max_tokens=24"]
SMALL_SCREEN = ["--set", "sources[0].env.width=160", "--set", "sources[0].env.height=120"]


def _eval(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main(["eval", *argv]) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _report(summary: dict) -> dict:
    return json.loads((Path(summary["report"]).parent / "eval.json").read_text())


def test_a_run_folder_is_evaluated_on_its_own_sources_with_its_newest_checkpoint(finished_run):
    """``vlrl eval`` of the canonical run's folder (tests/e2e/conftest.py): 3 episodes, chance, 1 screenshot."""
    run, summary = finished_run.run_dir, finished_run.evaluated
    assert summary["processor"] == str(run / CHECKPOINTS / "step-000003" / "hf")
    assert list(summary["sources"]) == ["desktop-click"]
    assert summary["sources"]["desktop-click"]["tasks"].keys() == {"click-target"}
    assert summary["episodes_played"] == 3 and summary["store_keys_left"] == 0
    assert 0 <= summary["sources"]["desktop-click"]["chance"] <= 1
    baselines = summary["sources"]["desktop-click"]["baselines"]  # on the very seeds evaluated
    assert baselines["seeds"] == [1_000_000, 1_000_002] and baselines["episodes"] == 3 and baselines["failed"] == 0
    assert 0 <= baselines["constant"] <= 1 and baselines["oracle"] == 1.0 and summary["baselines"]["best"] >= baselines["chance"]
    report = _report(summary)
    assert [e["seed"] for e in report["episodes"]] == [1_000_000, 1_000_001, 1_000_002]
    assert all(len(e["replies"]) == 1 for e in report["episodes"])  # one turn each, decoded
    for episode in report["episodes"]:  # and as the harness got it, in screen pixels
        (action,) = episode["actions"]
        assert re.fullmatch(r"[a-z_]+ \(\d+, \d+\)|invalid reply \(.*\)|[a-z_]+", action), action
    page = (run / "eval" / "report.md").read_text()
    assert "| desktop-click | click-target | 3 |" in page and "episodes/" in page
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
