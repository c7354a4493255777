"""Group-wise grading: the example grader, retries, failures, late results, concurrency."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.helpers.payloads import meta
from vlrl.control.grader import GraderRunner, ShortestSuccessGrader

FAST = GraderRunner.Config(backoff_s=0.001, max_attempts=3)


def _group(group_id="g", turns=(3, 5, 7, 4), success=(True, True, True, False)):
    return [
        meta(f"{group_id}/{i}", group=group_id, reward=float(s), success=s, turns=t, layout=(2, 3 * t))
        for i, (t, s) in enumerate(zip(turns, success))
    ]


class Flaky:
    """Fails ``failures`` times, then grades every sequence 0.5; records when it was called."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[float] = []

    async def grade(self, metas):
        self.calls.append(time.monotonic())
        if len(self.calls) <= self.failures:
            raise ConnectionError("judge unavailable")
        return [0.5] * len(metas)


class Gated:
    """Grades a group only once its gate opens; tracks calls in flight."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.in_flight = 0
        self.max_in_flight = 0

    async def grade(self, metas):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        gate = self.gates.get(metas[0].group_id)
        await (gate.wait() if gate else asyncio.sleep(0.005))
        self.in_flight -= 1
        return [1.0] * len(metas)


class Broken:
    def __init__(self, output) -> None:
        self.output = output
        self.calls = 0

    async def grade(self, metas):
        self.calls += 1
        return self.output


class Hangs:
    async def grade(self, metas):
        await asyncio.sleep(10)


# -- the example grader ------------------------------------------------------------------------


def test_shortest_success_grader_by_turns():
    # successes take 3, 5, 7 turns: 1 - 0.5 * (L - 3) / (7 - 3); the failure gets 0
    assert asyncio.run(ShortestSuccessGrader().grade(_group())) == [1.0, 0.75, 0.5, 0.0]


def test_shortest_success_grader_by_tokens():
    group = _group(turns=(1, 1, 1, 1))  # equal turns, responses of 3 tokens each
    group[1] = meta("g/1", success=True, layout=(2, 9))  # 9 generated tokens
    grader = ShortestSuccessGrader(length_weight=0.25, length="response_tokens")
    assert asyncio.run(grader.grade(group)) == [1.0, 0.75, 1.0, 0.0]


@pytest.mark.parametrize(
    ("success", "expected"),
    [((False, False, False, False), [0.0] * 4), ((False, True, False, False), [0.0, 1.0, 0.0, 0.0])],
)
def test_shortest_success_grader_edge_groups(success, expected):
    assert asyncio.run(ShortestSuccessGrader().grade(_group(success=success))) == expected


@pytest.mark.parametrize("weight", [-0.1, 1.0])
def test_shortest_success_grader_validates_its_weight(weight):
    with pytest.raises(ValueError, match=r"length_weight=.*expected a number in \[0, 1\)"):
        ShortestSuccessGrader(length_weight=weight)


def test_graded_metas_carry_new_rewards_and_keep_the_old():
    result = asyncio.run(FAST.build(ShortestSuccessGrader()).grade(_group()))
    assert result.ok and result.group_id == "g"
    assert [m.reward for m in result.metas] == [1.0, 0.75, 0.5, 0.0]
    assert result.original_rewards == (1.0, 1.0, 1.0, 0.0)
    assert [m.key for m in result.metas] == ["g/0", "g/1", "g/2", "g/3"]


# -- retries and failures ----------------------------------------------------------------------


def test_crashed_grader_is_retried_with_backoff():
    grader = Flaky(failures=2)
    cfg = GraderRunner.Config(backoff_s=0.02, backoff_factor=2.0, max_attempts=3)
    result = asyncio.run(cfg.build(grader).grade(_group()))
    assert result.ok and len(grader.calls) == 3
    assert [m.reward for m in result.metas] == [0.5] * 4
    first_wait, second_wait = grader.calls[1] - grader.calls[0], grader.calls[2] - grader.calls[1]
    assert first_wait >= 0.02 and second_wait >= 0.04


def test_backoff_delays():
    cfg = GraderRunner.Config(backoff_s=0.5, backoff_factor=2.0)
    assert [cfg.delay(k) for k in (1, 2, 3)] == [0.5, 1.0, 2.0]


def test_grader_that_always_fails_is_reported():
    grader = Flaky(failures=99)
    group = _group()
    result = asyncio.run(FAST.build(grader).grade(group))
    assert not result.ok and len(grader.calls) == 3
    assert result.error == "grader Flaky failed 3 attempts on group 'g'; last: ConnectionError: judge unavailable"
    assert result.metas == tuple(group)  # rewards untouched: the driver decides what a failed grade means


@pytest.mark.parametrize(
    ("output", "error"),
    [([1.0], "returned 1 rewards for a group of 4"), ([0.0, 1.0, float("inf"), 0.0], "non-finite rewards")],
)
def test_malformed_grades_count_as_failures(output, error):
    grader = Broken(output)
    result = asyncio.run(GraderRunner.Config(backoff_s=0, max_attempts=2).build(grader).grade(_group()))
    assert not result.ok and grader.calls == 2 and error in result.error


def test_hung_grader_times_out():
    cfg = GraderRunner.Config(backoff_s=0, max_attempts=2, timeout_s=0.01)
    result = asyncio.run(cfg.build(Hangs()).grade(_group()))
    assert not result.ok and result.error.endswith("last: TimeoutError")


def test_runner_needs_a_grader():
    with pytest.raises(TypeError, match=r"needs a Grader \(an object with async grade\(metas\)\), got int"):
        FAST.build(3)


# -- running alongside rollouts ----------------------------------------------------------------


def test_results_arrive_late_in_completion_order():
    async def scenario():
        grader = Gated()
        grader.gates["slow"] = asyncio.Event()
        runner = FAST.build(grader)
        runner.submit(_group("slow"))
        runner.submit(_group("fast"))
        assert runner.pending == 2 and runner.ready() == []
        first = await runner.next_result()
        assert first.group_id == "fast" and runner.pending == 1 and runner.ready() == []
        grader.gates["slow"].set()  # the slow judge returns after a later group
        late = await runner.next_result()
        assert late.group_id == "slow" and late.ok and runner.pending == 0
        with pytest.raises(RuntimeError, match="nothing submitted is still pending"):
            await runner.next_result()

    asyncio.run(scenario())


def test_ready_drains_without_waiting():
    async def scenario():
        runner = FAST.build(ShortestSuccessGrader())
        for g in ("a", "b", "c"):
            runner.submit(_group(g))
        while runner.pending:
            await asyncio.sleep(0)
        return runner.ready(), runner.ready()

    first, second = asyncio.run(scenario())
    assert sorted(r.group_id for r in first) == ["a", "b", "c"] and second == []


def test_concurrency_is_bounded():
    async def scenario():
        grader = Gated()
        runner = GraderRunner.Config(max_concurrency=3).build(grader)
        for i in range(10):
            runner.submit(_group(f"g{i}"))
        results = [await runner.next_result() for _ in range(10)]
        return grader, results

    grader, results = asyncio.run(scenario())
    assert grader.max_in_flight == 3 and all(r.ok for r in results)
