"""The warm start and baselines of an agent program (``WarmStart.teacher``, ``ProgramDemo``,
``ScriptedClicks``): the recipe's settings are checked naming the field, a source that kept no
run says so with its count and reasons, the baselines' clicks are ones the program reads, and a
program's unmeasured oracle stays None in every figure."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from vlrl.config import ConfigError, load_recipe
from vlrl.job.baselines import Outcomes, ScriptedClicks, SweepResult, below_baseline, grid_points, overall, summarise
from vlrl.job.demos import DemoEpisode, DemoResult, ProgramDemo, demo_tenant, unkept_sources
from vlrl.pool.tenant import TenantOutcome
from vlrl.rollout.client import ContextImage

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
RECIPE = f"{EXAMPLES / 'train_own_agent.py'}"


def test_the_counter_recipe_warm_starts_on_its_program_against_its_teacher():
    config = load_recipe(f"{RECIPE}:counter")
    tenant = demo_tenant(config.sources[0], 7, config.warm_start)
    assert isinstance(tenant, ProgramDemo) and tenant.seed == 7
    assert Path(tenant.teacher.script.split(":")[0]).is_absolute()  # loop hosts may run in another folder
    harness = load_recipe("examples/train_own_agent.py:warm_start")
    assert isinstance(demo_tenant(harness.sources[0], 7, harness.warm_start), DemoEpisode)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["warm_start.teacher=null"], r"'warm_start.teacher': got None.*ProgramTeacher\(script="),
        (["warm_start.teacher.script=examples/agents/no_teacher.py:teacher"], r"'warm_start.teacher.script'.*FileNotFoundError"),
        (["warm_start.teacher.script=examples/agents/counter_teacher.py:coach"], r"'warm_start.teacher.script'.*a function named 'coach'"),
    ],
)
def test_a_bad_teacher_is_named_before_anything_starts(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_recipe(f"{RECIPE}:counter", overrides).preflight()


def test_a_teacher_without_an_agent_program_is_refused():
    with pytest.raises(ConfigError, match=r"'warm_start.teacher'.*None: no source is an agent program"):
        load_recipe("examples/train_own_agent.py:warm_start", ["warm_start.teacher=ProgramTeacher", "warm_start.teacher.script=t.py:f"])


def test_a_program_that_kept_no_run_is_named_with_its_count_and_reasons():
    config = load_recipe(f"{RECIPE}:counter")
    source = config.sources[0]
    tenants = [demo_tenant(source, seed, config.warm_start) for seed in range(3)]
    outcomes = [
        TenantOutcome("a", "ok", DemoResult(reason="the program did not report a success")),
        TenantOutcome("b", "ok", DemoResult(reason="the program did not report a success")),
        TenantOutcome("c", "failed", error="AgentFailed: agent crashed: exit status 1\ntraceback"),
    ]
    said = unkept_sources(config.sources, tenants, outcomes)
    assert "sources[0] ('counter-agent', an agent program) kept 0 of 3 runs against warm_start.teacher" in said
    assert "'the program did not report a success': 2" in said and "'failed: AgentFailed: agent crashed: exit status 1': 1" in said
    outcomes[1] = TenantOutcome("b", "ok", DemoResult(metas=("a sequence",)))
    assert unkept_sources(config.sources, tenants, outcomes) == ""


def _image(width: int, height: int) -> ContextImage:
    return ContextImage.of(np.zeros((height, width, 3), np.uint8))


@pytest.fixture(autouse=True, scope="module")
def _counter_agent_importable():
    import sys

    sys.path.insert(0, str(EXAMPLES / "agents"))
    yield
    sys.path.remove(str(EXAMPLES / "agents"))


@pytest.mark.parametrize("point", [None, 5])
def test_a_baseline_clicks_inside_the_newest_screen_as_the_program_parses_it(point):
    from counter_agent import ACTION

    clicks = ScriptedClicks("pyautogui", seed=3, grid=(4, 3), point=point)
    for _ in range(20):
        text = asyncio.run(clicks({"messages": []}, [_image(320, 240), _image(160, 120)]))
        match = ACTION.search(text)
        assert match is not None, text
        x, y = int(match[1]), int(match[2])
        assert 0 <= x < 160 and 0 <= y < 120  # the newest screenshot's pixels, not the first's
        if point is not None:
            assert (x, y) == grid_points(160, 120, (4, 3))[point] == clicks.points[point]


def test_a_program_without_a_teacher_has_no_oracle_figure():
    sweeps = {s: SweepResult(s, "", (s == 0, True), ((10, 10), (30, 10))) for s in range(4)}
    played = summarise(Outcomes(seeds=[0, 1, 2, 3], chance={0: ("", True), 1: ("", False), 2: ("", False), 3: ("", False)}, oracle=None, sweeps=sweeps))
    assert played["oracle"] is None and played["failed"] == 0
    assert (played["chance"], played["constant"], played["constant_point"]) == (0.25, 1.0, [30, 10])
    both = overall({"program": played})
    assert both["oracle"] is None and both["best"] == 1.0
    assert "the oracle not measured" in below_baseline(0.5, both, episodes=4)
