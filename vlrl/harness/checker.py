"""The harness checker: the behaviour every harness codebase must show (its contract tests).

Two levels. ``check_factory`` holds the construct-time rules the registry runs on every id when
it is first made: they read the class, so they cost microseconds and need nothing installed
beyond the harness's own module. ``check_harness`` is the full behaviour suite on two live
instances: 0.02 s for ``desktop`` but 3.3 s for ``browser`` and ``miniwob`` (each launches two
browsers), and it would need the browser on the driver, which only builds hosts. So it runs in
contract tests and ``vlrl check harness ID``.

The behaviour rules, in the order they run:

1. ``types``: ``reset`` returns ``(Observation, dict)``, ``step`` ``(Observation, float, bool,
   bool, dict)`` with a finite reward and ``info["success"]`` a bool. The scalars are Python's
   own: nothing between the harness and the episode records converts them (rewards are summed,
   infos logged as JSON), so a numpy scalar is refused with its type named.
2. ``task info``: the reset info names the episode's task family, ``info["task"]``, one of
   ``tasks`` when the harness declares any.
3. ``screen size``: the screenshots are ``width`` x ``height`` when the settings give those, or
   else when the harness declares them with defaults (constructor keywords, or its ``Config``
   dataclass's fields): the size a source gets when it sets none.
4. ``determinism``: the same seed gives the same first observation on two instances.
5. ``tasks``: every declared family is honoured (``reset(options={"task": t})`` gives
   ``info["task"] == t``) and states its goal; an unknown one is refused, naming it.
6. ``order``: ``fail`` terminates; a step after the end raises ``HarnessError``.
7. ``bounds``: a click off the screen raises ``ActionError`` naming the coordinate.
8. ``oracle`` (a harness that defines one): played from ``reset(seed)`` for each of the
   ``ORACLE_SEEDS``, it solves at least ``ORACLE_MIN_SOLVE_RATE`` of the episodes it has a script
   for, since the warm start learns from its demonstrations; the rule reports the rate.
9. ``replay``: an episode of up to ``REPLAY_MOVES`` moves (the oracle's, else seeded clicks; the
   first of ``REPLAY_SEEDS`` seeds whose episode lasts past one move) is recorded on one instance and replayed on the other (``vlrl.harness.fork.replay``): every
   screen must have the recorded state, since branching rollouts restart episodes this way.
10. ``fork`` (a harness that overrides ``fork``): a fork taken after the first move and the
   original, sent the further moves in turns, both show the recorded screens: the copy is the
   same state, and stepping one leaves the other alone.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from vlrl.harness.actions import Action
from vlrl.harness.base import Harness
from vlrl.harness.errors import ActionError, HarnessError
from vlrl.harness.fork import EpisodeRecord, ReplayDivergence, forks, replay, state_of
from vlrl.harness.observation import Observation
from vlrl.harness.settings import declared_int_default
from vlrl.registry import ContractError, PluginSpec

ORACLE_MIN_SOLVE_RATE = 0.5
"""Least share of its episodes the oracle must solve (so a rate of 0 always fails): a warm start
on demonstrations that fail more often than not teaches failing."""
ORACLE_SEEDS = tuple(range(8))
"""Seeds the oracle is played on: more than two, so that a harness with several task families has
most of them played (a rate on 8 episodes is known to about +-0.18)."""
ORACLE_MAX_STEPS = 100
"""Steps after which an oracle episode that has not ended counts as unsolved."""
REPLAY_MOVES = 4
"""Moves of the episode the replay and fork rules record: enough to cross a few screens, few
enough for a real browser (about 0.3 s a move)."""
REPLAY_SEEDS = 4
"""Seeds tried, from the determinism rule's last, for an episode that lasts past its first move
(one that ends at once leaves nothing to fork)."""


class HarnessContractError(ContractError, AssertionError):
    """A harness that breaks the contract; ``rule`` names the broken rule."""


def check_factory(spec: PluginSpec, factory: Callable[..., Any]) -> None:
    """The registry's check of ``spec``: every rule of ``factory_rules``."""
    for _ in factory_rules(factory):
        pass


def factory_rules(factory: Callable[..., Any]) -> Iterator[str]:
    """The construct-time rules of a harness class, yielding each name once it passed (a plain
    factory function has none: ``make`` checks what it builds)."""
    if not inspect.isclass(factory):
        return
    _expect("harness class", issubclass(factory, Harness), f"{factory.__qualname__} does not subclass vlrl Harness")
    abstract = sorted(getattr(factory, "__abstractmethods__", ()))
    _expect("harness class", not abstract, f"{factory.__qualname__} leaves {abstract} abstract")
    yield "harness class"
    tasks = factory.tasks
    _expect(
        "task names",
        isinstance(tasks, tuple) and all(isinstance(t, str) and t for t in tasks) and len(set(tasks)) == len(tasks),
        f"tasks={tasks!r}; expected a tuple of distinct non-empty strings",
    )
    yield "task names"
    _expect("thread_bound", isinstance(factory.thread_bound, bool), f"{factory.thread_bound!r}; expected a bool")
    yield "thread_bound"


def check_harness(
    factory: Callable[..., Harness],
    *,
    seeds: tuple[int, ...] = (0, 1),
    settings: Mapping[str, Any] | None = None,
    oracle_seeds: tuple[int, ...] = ORACLE_SEEDS,
) -> None:
    """Run the contract on fresh instances ``factory(**settings)``; raise ``HarnessContractError``."""
    for _ in contract(factory, seeds=seeds, settings=settings, oracle_seeds=oracle_seeds):
        pass


def contract(
    factory: Callable[..., Harness],
    *,
    seeds: tuple[int, ...] = (0, 1),
    settings: Mapping[str, Any] | None = None,
    oracle_seeds: tuple[int, ...] = ORACLE_SEEDS,
) -> Iterator[str]:
    """Run the behaviour rules (module docstring) on two instances ``factory(**settings)``,
    yielding each rule's name once it passed (the oracle's with its solve rate); ``seeds`` are
    the determinism rule's, ``oracle_seeds`` the oracle's."""
    settings = dict(settings or {})
    first, second = factory(**settings), factory(**settings)
    try:
        reset_obs, reset_info, step_obs = _check_types(first)
        yield "types"
        _check_task_info(first, reset_info)
        yield "task info"
        yield _check_screen_size(settings, _declared_size(factory), (reset_obs, step_obs))
        _check_determinism(first, second, seeds)
        yield "determinism"
        _check_tasks(first)
        yield "tasks"
        _check_order(first)
        yield "order"
        _check_bounds(first)
        yield "bounds"
        yield _check_oracle(first, oracle_seeds)
        record = _record_episode(first, seeds[-1])
        for seed in range(seeds[-1] + 1, seeds[-1] + REPLAY_SEEDS):  # one that lasts past a fork, if any does
            if len(record.moves) > 1:
                break
            record = _record_episode(first, seed)
        yield _check_replay(second, record)
        yield _check_fork(first, record)
    finally:
        first.close()
        second.close()
        first.close()  # close is idempotent


def _expect(rule: str, condition: bool, detail: str) -> None:
    if not condition:
        raise HarnessContractError(rule, detail)


def _type_name(value: object) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _expect_scalar(name: str, value: object, kind: type) -> None:
    """``value`` is a Python ``kind``; a numpy scalar (even ``np.float64``, a float subclass) is
    named, with the fix."""
    numpy = isinstance(value, np.generic)
    convert = f" (convert it with {kind.__name__}(...))" if numpy else ""
    detail = f"{name} is {_type_name(value)}; expected a Python {kind.__name__}{convert}"
    _expect("types", isinstance(value, kind) and not numpy, detail)


def _step_types(result: object) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
    """``result`` as a checked step result."""
    shape = "step must return (obs, reward, terminated, truncated, info)"
    _expect("types", isinstance(result, tuple) and len(result) == 5, shape)
    obs, reward, terminated, truncated, info = result
    _expect("types", isinstance(obs, Observation), f"step must return an Observation, got {_type_name(obs)}")
    _expect_scalar("reward", reward, float)
    _expect("types", math.isfinite(reward), f"reward must be a finite float: {reward!r}")
    _expect_scalar("terminated", terminated, bool)
    _expect_scalar("truncated", truncated, bool)
    _expect("types", isinstance(info, dict), f"step info must be a dict, got {_type_name(info)}")
    _expect("types", "success" in info, "step info must say if the task is solved: info['success']")
    _expect_scalar("info['success']", info["success"], bool)
    return obs, reward, terminated, truncated, info


def _check_types(harness: Harness) -> tuple[Observation, dict[str, Any], Observation]:
    """The first reset's observation and info, and the observation after one ``wait``."""
    result = harness.reset(seed=0)
    _expect("types", isinstance(result, tuple) and len(result) == 2, "reset must return (observation, info)")
    reset_obs, info = result
    _expect("types", isinstance(reset_obs, Observation), f"reset must return an Observation: {_type_name(reset_obs)}")
    _expect("types", isinstance(info, dict), f"reset info must be a dict, got {_type_name(info)}")
    step_obs = _step_types(harness.step(Action.wait()))[0]
    return reset_obs, info, step_obs


def _check_task_info(harness: Harness, info: dict[str, Any]) -> None:
    task = info.get("task")
    named = isinstance(task, str) and bool(task)
    _expect("task info", named, f"reset info must name the episode's task family: info['task'] is {task!r}")
    declared = tuple(harness.tasks)
    _expect("task info", not declared or task in declared, f"reset info['task']={task!r}; expected one of {declared}")


def _declared_size(factory: Callable[..., Harness]) -> dict[str, int]:
    """The ``width``/``height`` defaults ``factory`` declares (``settings.declared_int_default``)."""
    sizes = {name: declared_int_default(factory, name) for name in ("width", "height")}
    return {name: value for name, value in sizes.items() if value is not None}


def _check_screen_size(settings: dict[str, Any], declared: dict[str, int], observations: tuple[Observation, ...]) -> str:
    wanted = {name: settings[name] for name in ("width", "height") if name in settings}
    origin = "the settings give"
    if not wanted:
        wanted, origin = declared, "the constructor's defaults are"
    if not wanted:
        return "screen size: no width/height set or declared"
    given = ", ".join(f"{name}={value}" for name, value in wanted.items())
    for obs in observations:
        fits = all(getattr(obs, name) == value for name, value in wanted.items())
        _expect("screen size", fits, f"{origin} {given} but a screenshot is {obs.width}x{obs.height}")
    return f"screen size: {given} as set" if origin == "the settings give" else f"screen size: {given} by default"


def _check_determinism(first: Harness, second: Harness, seeds: tuple[int, ...]) -> None:
    for seed in seeds:
        a, _ = first.reset(seed=seed)
        b, _ = second.reset(seed=seed)
        _expect(
            "determinism",
            np.array_equal(a.screenshot, b.screenshot) and a.goal == b.goal,
            f"reset(seed={seed}) must give the same first observation on two instances",
        )


def _check_tasks(harness: Harness) -> None:
    for task in harness.tasks:
        obs, info = harness.reset(seed=3, options={"task": task})
        named = info.get("task") if isinstance(info, dict) else None
        _expect("tasks", named == task, f"reset(options={{'task': {task!r}}}) ran a {named!r} episode (info['task'])")
        _expect("tasks", obs.goal is not None, f"task {task!r}: the observation must state the goal")
    try:
        harness.reset(seed=0, options={"task": "no-such-task"})
    except (HarnessError, ValueError) as error:
        _expect("tasks", "no-such-task" in str(error), "an unknown task error must name the task")
    else:
        raise HarnessContractError("tasks", "reset with an unknown task must raise HarnessError or ValueError")


def _check_order(harness: Harness) -> None:
    harness.reset(seed=0)
    _, _, terminated, _, _ = harness.step(Action.fail("checker"))
    _expect("order", terminated, "a fail action must terminate the episode")
    try:
        harness.step(Action.wait())
    except HarnessError:
        pass
    else:
        raise HarnessContractError("order", "step after the episode ended must raise HarnessError until reset")


def _check_bounds(harness: Harness) -> None:
    obs, _ = harness.reset(seed=0)
    try:
        harness.step(Action.click(obs.width + 5, 0))
    except ActionError as error:
        _expect("bounds", str(obs.width + 5) in str(error), "an out-of-screen action error must name the coordinate")
    else:
        raise HarnessContractError("bounds", "a click outside the screenshot must raise ActionError")


def _check_oracle(harness: Harness, seeds: tuple[int, ...]) -> str:
    """Episodes whose first ``oracle()`` is None (no script for that task) do not count."""
    if type(harness).oracle is Harness.oracle:
        return "oracle: none"
    played = solved = 0
    for seed in seeds:
        harness.reset(seed=seed)
        action = harness.oracle()
        if action is not None:
            played += 1
            solved += _oracle_solves(harness, action, seed)
    if not played:
        return f"oracle: no script for the episodes of seeds {list(seeds)}"
    rate = solved / played
    _expect(
        "oracle",
        rate >= ORACLE_MIN_SOLVE_RATE,
        f"the oracle solved {solved} of {played} episodes (seeds {list(seeds)}), a rate of {rate:.0%};"
        f" expected at least {ORACLE_MIN_SOLVE_RATE:.0%}",
    )
    unscripted = f", {len(seeds) - played} without a script" if played < len(seeds) else ""
    return f"oracle: solved {solved}/{played} episodes ({rate:.0%}{unscripted})"


def _oracle_solves(harness: Harness, action: Action, seed: int) -> bool:
    """Play the oracle from ``action`` until the episode ends; whether it was solved."""
    for _ in range(ORACLE_MAX_STEPS):
        try:
            result = harness.step(action)
        except ActionError as error:
            detail = f"seed {seed}: the harness refused its own oracle's {action}: {error}"
            raise HarnessContractError("oracle", detail) from None
        _, _, terminated, truncated, info = _step_types(result)
        if terminated or truncated:
            return info["success"]
        action = harness.oracle()
        if action is None:
            return False
    return False


def _record_episode(harness: Harness, seed: int) -> EpisodeRecord:
    """Up to ``REPLAY_MOVES`` moves from ``reset(seed)``: the oracle's where it has one, else
    clicks drawn from a generator seeded by ``seed``; each screen's state recorded."""
    rng = np.random.default_rng(seed)
    obs, _ = harness.reset(seed=seed)
    moves: list[Action] = []
    states = [state_of(obs)]
    for _ in range(REPLAY_MOVES):
        move = harness.oracle()
        if move is None:
            move = Action.click(int(rng.integers(obs.width)), int(rng.integers(obs.height)))
        try:
            obs, _, terminated, truncated, _ = _step_types(harness.step(move))
        except ActionError:
            terminated = truncated = False  # refused: the screen stays, as replay will find it
        moves.append(move)
        states.append(state_of(obs))
        if terminated or truncated:
            break
    return EpisodeRecord(seed, None, tuple(moves), tuple(states))


def _check_replay(harness: Harness, record: EpisodeRecord) -> str:
    try:
        replay(harness, record, len(record.states) - 1)
    except ReplayDivergence as error:
        raise HarnessContractError(
            "replay",
            f"seed {record.seed}, moves {[str(m) for m in record.moves]} replayed on a second instance: {error};"
            " most likely the harness draws from a random source its reset seed does not set, or shows time",
        ) from None
    return f"replay: {len(record.states)} screens identical on a second instance"


def _check_fork(harness: Harness, record: EpisodeRecord) -> str:
    """Fork after the first move; the twin and the original both take the remaining moves."""
    if not forks(harness):
        return "fork: none (branches replay)"
    if len(record.moves) < 2:
        return f"fork: not checked (the seed-{record.seed} episode ended after {len(record.moves)} move)"
    replay(harness, record, 1)
    twin = harness.fork()
    try:
        _expect("fork", isinstance(twin, type(harness)), f"fork() returned {_type_name(twin)}; expected a {type(harness).__name__}")
        _expect("fork", twin is not harness, "fork() returned the instance itself; expected a copy")
        for turn, move in enumerate(record.moves[1:], start=2):  # in turns: neither may move the other
            for name, instance in (("the fork", twin), ("the original", harness)):
                try:
                    obs = _step_types(instance.step(move))[0]
                except ActionError:
                    continue
                _expect(
                    "fork",
                    state_of(obs) == record.states[turn],
                    f"{name}, sent move {turn - 1} ({move}) after a fork at turn 1, shows another screen than the"
                    " recorded one; a fork must copy the whole state and share nothing that steps change",
                )
    finally:
        twin.close()
    return f"fork: {len(record.moves) - 1} screen(s) after a fork identical on the fork and the original"
