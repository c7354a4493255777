"""``vlrl bench chaos``: the main job's training loop under faults, one fault kind per run.

Each run trains the tiny model on the main job's click-target source at CI size (a Harness Pool,
an embedded engine, the Ray store, the metadata-only driver with an asynchronous judge, the
trainer and weight pushes) and, at a random moment of a random step, injects one fault. The
session is the training job's (``JobSession``, on ``RolloutRuntime``), the driver is built as the
job builds it (``rl_step.rl_driver``: the job's tenants), and each step is the job's ``rl_step``.

The runs share one session (engine, store, pool and trainer), one after the other, as one
training run whose policy versions go on from run to run: what a fault leaves behind (a replaced
host, a restarted engine or shard with empty caches, a stalled harness thread) is what the next
run trains on, which is the claim under test, that a survived fault leaves the job usable. Each
run has a driver of its own, so its books and its failure reasons are its own, and the store
must be empty again when that driver closes. A run that did not survive, or left a key, ends the
session: the next fault starts a fresh one (``session`` counts them), so it is never blamed for
an earlier fault's damage. ``cache_miss_burst`` needs its own engine settings and so its own
session. Every run's harness is the desktop made thread-bound (``chaos-desktop``: the
``harness_timeout`` stall needs it; it behaves as the desktop until the stall is armed). The faults:

- ``loop_host`` / ``env_host``: a loop host / env host actor killed (its tenants die with it);
- ``engine``: the engine replica killed (Ray restarts it; its caches are empty);
- ``store_shard``: a store index shard killed (its index and the payloads it owned are gone; Ray
  restarts it empty);
- ``grader_hang``: one judge call never returns;
- ``harness_timeout``: one harness call (a thread-bound harness's reset) outlives the tenant timeout,
  and so does the close that releasing the broken instance queues behind it on its one thread;
- ``hook_store_error``: the accept-time hook's store read raises, once;
- ``pool_run_raises``: one ``pool.run`` of the driver raises (its group fails; the run goes on);
- ``cache_miss_burst``: the engine's image cache is too small for any reference to hit.

For each: ``injected`` (the fault happened), ``survived`` (the run finished its steps),
``books_exact`` (after every step and at close, the driver's books from independent counts agree:
each outcome's count equals the sum of its reasons, generated = accepted + rejected + dropped +
failed + stale + pending with pending the groups really open, and the book's open and buffered
groups are the driver's own; ``Driver.books_drift``), ``books_drift`` (what disagreed, each line
naming its counter), ``books`` (the driver's counts, reasons and incidents), ``keys_left`` (store
keys after the driver closed: 0 means nothing leaked), ``error`` (what ended a run that did not
survive, its type and first line), ``session`` (which session ran it, from 0) and the driver's
failure reasons. Nothing is simulated: actors are killed with ``ray.kill``, the judge and the
harness really stall.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

FAULTS = (
    "loop_host", "env_host", "engine", "store_shard",
    "grader_hang", "harness_timeout", "hook_store_error", "pool_run_raises", "cache_miss_burst",
)  # fmt: skip
STEPS = {"smoke": 2, "small": 3, "full": 8}
"""RL steps per run (at least 2: the fault comes in any step but the last)."""
TIMEOUT_S = 4.0
"""Tenant and judge timeouts of the runs: a stalled call outlives them by a few seconds."""


def run(size: str = "small") -> dict[str, Any]:
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, log_to_driver=False, object_store_memory=512 * 1024**2)
    try:
        faults = run_faults(FAULTS, STEPS[size])
    finally:
        if started:
            ray.shutdown()
    return {
        "faults": faults,
        "survived": sum(f["survived"] for f in faults.values()),
        "books_exact": sum(f["books_exact"] for f in faults.values()),
        "keys_left": sum(f["keys_left"] or 0 for f in faults.values()),
        "runs": len(faults),
        "sessions": len({f["session"] for f in faults.values()}),
    }


def run_faults(faults: tuple[str, ...], steps: int, *, seed: int | None = None) -> dict[str, dict[str, Any]]:
    """One run of ``steps`` RL steps per fault, in order, on as few sessions as stay sound (the
    module's docstring); each fault's outcome. ``seed``: every run's injection draws (the moment
    and the step); None draws from the fault's place in ``FAULTS``."""
    _register_chaos_desktop()
    outcomes: dict[str, dict[str, Any]] = {}
    sessions = 0
    for setting in dict.fromkeys(map(_setting, faults)):
        pending = [fault for fault in faults if _setting(fault) == setting]
        while pending:
            ran = _session(pending, steps, seed, sessions)
            outcomes.update(ran)
            pending = pending[len(ran) :]
            sessions += 1
    return {fault: outcomes[fault] for fault in faults}


def _setting(fault: str) -> str:
    """The faults of one setting can share a session (the same config)."""
    return "tiny image cache" if fault == "cache_miss_burst" else "main"


def _session(faults: list[str], steps: int, seed: int | None, index: int) -> dict[str, dict[str, Any]]:
    """``faults`` in turn on one session, until one leaves it unsound; the outcomes of those run."""
    from vlrl.job.session import JobSession

    with tempfile.TemporaryDirectory(prefix="vlrl-chaos-") as scratch:
        config = _config(faults[0], Path(scratch), steps * len(faults))
        with JobSession(config, config.plan()) as session:
            return asyncio.run(_train_each(session, faults, steps, seed, index))


async def _train_each(
    s: Any, faults: list[str], steps: int, seed: int | None, index: int
) -> dict[str, dict[str, Any]]:
    plan = s.plan
    group = plan.trainer.build(plan.rl, model_path=s.model_path, store_config=s.config.store, layout=plan.layout)
    outcomes: dict[str, dict[str, Any]] = {}
    try:
        for fault in faults:
            rng = random.Random(FAULTS.index(fault) if seed is None else seed)
            out: dict[str, Any] = {"injected": False, "survived": False, "books_exact": True, "keys_left": None}
            out["session"] = index
            await _train(s, group, fault, steps, rng, out)
            outcomes[fault] = out
            if not out["survived"] or out["keys_left"] != 0:
                break  # the session is not sound for the next fault: a fresh one runs it
    finally:
        group.shutdown()
    return outcomes


def _config(fault: str, run_dir: Path, steps: int) -> Any:
    """The session's config for ``fault``'s setting; ``steps``: all its runs' steps together."""
    from vlrl.recipes import AgentBehaviour, DataSource, EnvSettings, Evaluation, GraderRunner, base_recipe

    source = DataSource(
        name="click",
        codebase=CHAOS_DESKTOP,
        agent=AgentBehaviour(max_turns=3 if fault == "cache_miss_burst" else 1, max_tokens=24, prompt_template="gui-agent-short"),
        env=EnvSettings(width=160, height=120, tasks=["click-target"], params={"distractors": 0}),
        group_size=4,
    )
    config = base_recipe([source], run_dir=str(run_dir))
    config.warm_start, config.steps, config.progress.enabled = None, steps, False
    config.eval = Evaluation(episodes=1, every=0, screenshots=0, chance=False)
    config.tensorboard = config.plots = False
    config.driver.groups_per_batch = 2
    config.driver.grader = GraderRunner.Config(timeout_s=TIMEOUT_S, max_attempts=1, backoff_s=0)
    config.advantage.sampler.include_min = True  # an untrained policy fails everything: keep such groups
    config.advantage.drop_zero_advantage = False
    config.pool.env_host = replace(config.pool.env_host, tenant_timeout_s=TIMEOUT_S)
    if fault == "cache_miss_burst":
        config.engine = replace(config.engine, image_cache_mb=0.01)
    return config


async def _train(s: Any, group: Any, fault: str, steps: int, rng: random.Random, out: dict[str, Any]) -> None:
    """One fault's run: ``steps`` RL steps of a driver of its own from the engines' version on,
    ``fault`` injected; its outcome folded into ``out``."""
    from vlrl.job.rl_step import rl_driver
    from vlrl.pool.remote_errors import describe

    judge = Judge()
    store = FlakyStore(s.store)
    pool = FlakyPool(s.meter)
    driver = rl_driver(s, grader=judge, pool=pool, store=store, seed=0)  # the job's driver and tenants
    armed = fault in ("grader_hang", "harness_timeout", "hook_store_error", "pool_run_raises")
    at_step = 0 if armed else rng.randrange(steps - 1)  # armed faults need rollouts still to come
    injector = None

    def inject(step: int) -> None:
        nonlocal injector
        if step == at_step:
            injector = asyncio.get_running_loop().create_task(
                _inject(fault, s, judge, store, pool, rng.uniform(0.1, 1.0))
            )

    try:
        await run_steps(s, driver, group, steps, out, before_step=inject, first_version=s.engine_version)
        out["survived"] = True
    except Exception as error:  # the figure is what ended the run
        out["error"] = describe(error).splitlines()[0]
    finally:
        if injector is not None:
            out["injected"] = (await injector)()
        STALL_FLAG.unlink(missing_ok=True)
        try:
            await driver.close()
            _check_books(driver, out)
            out["keys_left"] = s.store.stats().keys
        except Exception as error:
            out.setdefault("error", f"close: {describe(error).splitlines()[0]}")
        out["reasons"] = dict(driver.book.reasons)
        out["books"] = driver.book.report()


async def run_steps(
    s: Any, driver: Any, group: Any, steps: int, out: dict[str, Any], *, before_step: Any = None, first_version: int = 0
) -> None:
    """``steps`` RL steps from policy version ``first_version``, each the training job's own
    ``rl_step``; ``before_step(step)`` runs before each (the fault injection); the books are
    checked after each."""
    from vlrl.job.rl_step import rl_step

    for step in range(steps):
        if before_step is not None:
            before_step(step)
        await rl_step(s, driver, group, first_version + step, last=step + 1 == steps)
        _check_books(driver, out)


async def _inject(fault: str, s: Any, judge: Judge, store: FlakyStore, pool: FlakyPool, delay_s: float) -> Any:
    """Wait ``delay_s`` into the step, then cause ``fault``; returns a check of whether it took
    effect (an armed stall or read failure counts once something ran into it)."""
    import ray

    await asyncio.sleep(delay_s)
    if fault == "loop_host":
        ray.kill(s.pool.loop.hosts()[0], no_restart=True)
    elif fault == "env_host":
        ray.kill(next(iter(s.pool.envs.values())).hosts()[0], no_restart=True)
    elif fault == "engine":
        ray.kill(s.engines[0], no_restart=False)
    elif fault == "store_shard":
        ray.kill(_shard(s.config.store.namespace, 0), no_restart=False)
    elif fault == "grader_hang":
        judge.hang_next.set()
        return lambda: not judge.hang_next.is_set()
    elif fault == "harness_timeout":
        STALL_FLAG.touch()
        return lambda: not STALL_FLAG.exists()
    elif fault == "hook_store_error":
        store.fail_next_reads = 1
        return lambda: store.fail_next_reads == 0
    elif fault == "pool_run_raises":
        pool.fail_next_runs = 1
        return lambda: pool.fail_next_runs == 0
    return lambda: True  # a kill, or the tiny image cache that misses from the start


def _check_books(driver: Any, out: dict[str, Any]) -> None:
    """Fold the driver's books check into ``out``: exact so far, and every line that drifted."""
    drift = driver.books_drift()
    out["books_exact"] &= not drift
    known = out.setdefault("books_drift", [])
    known.extend([line for line in drift if line not in known])


class Judge:
    """An asynchronous grader that rewards the harness's verdict; ``hang_next`` makes its next
    call never return (the runner's timeout must end it)."""

    def __init__(self) -> None:
        self.hang_next = threading.Event()

    async def grade(self, metas: list[Any]) -> list[float]:
        if self.hang_next.is_set():
            self.hang_next.clear()
            await asyncio.Event().wait()
        return [float(m.success) for m in metas]


class FlakyStore:
    """The run's store as the driver sees it; ``fail_next_reads`` reads raise a store error."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.fail_next_reads = 0

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail()
        return self._store.get(*args, **kwargs)

    def get_range(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail()
        return self._store.get_range(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _maybe_fail(self) -> None:
        from vlrl.store.errors import StoreError

        if self.fail_next_reads > 0:
            self.fail_next_reads -= 1
            raise StoreError("chaos: an injected store read failure")


class FlakyPool:
    """The run's pool as the driver sees it; ``fail_next_runs`` runs raise before they start."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self.fail_next_runs = 0

    async def run(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail_next_runs > 0:
            self.fail_next_runs -= 1
            raise RuntimeError("chaos: an injected pool.run failure")
        return await self._pool.run(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


CHAOS_DESKTOP = "chaos-desktop"
STALL_FLAG = Path(tempfile.gettempdir()) / "vlrl-chaos-stall"
"""Dropped by the injector; the next reset of a ``chaos-desktop`` instance takes it and stalls."""


def _register_chaos_desktop() -> None:
    """The desktop harness, thread-bound, whose next ``reset`` after the flag appears outlives the
    tenant timeout (every episode resets; an untrained policy's replies rarely reach ``step``.
    The env hosts run it in their own processes: the flag is a file)."""
    from harnesses.desktop import DesktopHarness
    from vlrl.harness import register

    class StallingDesktop(DesktopHarness):
        thread_bound: ClassVar[bool] = True

        def reset(self, **kwargs: Any) -> Any:
            try:
                STALL_FLAG.unlink()
            except FileNotFoundError:
                return super().reset(**kwargs)
            time.sleep(TIMEOUT_S * 2.5)  # past the call's timeout, and past the close queued behind it
            return super().reset(**kwargs)

    register(CHAOS_DESKTOP, StallingDesktop, override=True)


def _shard(namespace: str, index: int) -> Any:
    """The actor of one of a Ray store's index shards (named ``ray-store/<namespace>/<i>``)."""
    import ray

    from vlrl.store.remote_index import RAY_NAMESPACE

    return ray.get_actor(f"ray-store/{namespace}/{index}", namespace=RAY_NAMESPACE)
