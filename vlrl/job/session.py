"""What a ``vlrl train`` run holds while it lasts, and where it stands.

``JobSession`` builds and tears down the run's resources (run folder, logs and experiment
trackers, the progress line, and the rollout side: ``RolloutRuntime``'s model, engines, OPD
teacher, store and Harness Pool) from the run's config and its resolved plan (``run_plan``), and
offers the job what it needs from them: weight pushes, checkpoint folders, store clean-up and
figures.
``RunState`` is what ``state.json`` next to every checkpoint records for ``--resume``.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vlrl.config import ConfigError
from vlrl.control.driver import Driver
from vlrl.job.meters import RolloutMeter
from vlrl.job.metrics_log import METRICS_FILE, REVERTED_FILE, TB_DIR, MetricsLog
from vlrl.job.plots import EPISODES_DIR, PLOTS_DIR
from vlrl.job.progress import Progress
from vlrl.job.run_folder import (
    CHECKPOINTS,
    SUMMARY_FILE,
    newest_checkpoint,
    read_checkpoint_state,
    write_checkpoint_state,
    write_evaluation,
    write_sources,
)
from vlrl.job.rollout_runtime import RolloutRuntime
from vlrl.job.run_plan import TINY_FOLDER, RunPlan
from vlrl.job.tracking import IDS_FILE
from vlrl.mm import delete_sequences
from vlrl.models import family_of
from vlrl.records import SeqMeta
from vlrl.rollout.engine.weights_keeper import weights_keeper
from vlrl.train.trainer_group import TrainerGroup


@dataclass(slots=True)
class RunState:
    """Where a run stands; written next to every checkpoint (``state.json``) for ``resume``."""

    step: int = 0
    """RL steps done."""
    version: int = 0
    """Weight pushes to the engines so far (the policy version of the next rollouts)."""
    generated: int = 0
    """Training groups started so far."""
    next_seeds: dict[str, int] = field(default_factory=dict)
    """Per source, the first task seed no group has used yet."""
    open_seeds: dict[str, list[int]] = field(default_factory=dict)
    """Per source, the task seeds of groups started and not trained (rolling out or buffered ahead
    when the checkpoint was taken): a resumed run starts them again first, so that each group is
    trained once."""
    policy: str = ""
    """Checkpoint folder the RL trainer is built from (the warm start's, or the base model)."""
    checkpoint: str = ""
    """Last RL checkpoint, '' before the first."""
    success: dict[str, float] = field(default_factory=dict)
    """Held-out success by evaluation tag ('chance', 'base', 'warm', 'step10', ...)."""
    group_books: dict[str, Any] = field(default_factory=dict)
    """The RL stage's driver book (``DriverBook.report``: counts, the reason of every group that
    left untrained, store incidents, and ``drift``: what disagreed), taken after the driver
    closed, so that ``summary.json``'s counts and reasons are one snapshot and add up."""



class JobSession:
    """What a run holds while it lasts: run folder, model, engines, store, pool, logs; all of it
    is torn down (actors ended, store destroyed) when the ``with`` block ends."""

    def __init__(self, config: Any, plan: RunPlan) -> None:
        """``config``: the run's ``TrainJob.Config``; ``plan``: what it resolves to
        (``run_plan.resolve``), which the model and engines are built from."""
        self.config = config
        self.plan = plan
        self.run_dir = Path(config.run_dir).resolve()
        self.engine_version = 0
        self._pause_totals: dict[int, float] = {}
        self._ends = contextlib.ExitStack()

    def __enter__(self) -> JobSession:
        config = self.config
        if not config.resume:
            self._clear()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_sources(self.run_dir, config.sources)
        write_evaluation(self.run_dir, config.eval)
        # trackers first: a refused login or server fails the run before the model and engines load
        self.log = MetricsLog(self.run_dir, tensorboard=config.tensorboard, trackers=config.tracking.start(self.run_dir, config))
        self.progress = Progress(config.progress)
        try:
            self._start()
        except BaseException:
            try:
                self._ends.__exit__(*sys.exc_info())
            finally:
                self.log.close(failed=True)
            raise
        return self

    def _start(self) -> None:
        """The rollout side (``RolloutRuntime``: model, engines, teacher, store, pool), ended by ``__exit__``."""
        config = self.config
        runtime = self._ends.enter_context(
            RolloutRuntime(config, engine=self.plan.engine, model_path=self.plan.model_path, teacher=config.teacher)
        )
        self.model_path = runtime.model_path
        self.family = family_of(self.model_path)
        """The policy's model family (the summary's ``model_family``)."""
        self.annotator = runtime.annotator
        self.lora_push = self.plan.lora_push
        """Under LoRA, how pushes reach the engines (``RunPlan.lora_push``)."""
        self.engines, self.teacher, self.store, self.pool = runtime.engines, runtime.teacher, runtime.store, runtime.pool
        self.meter = RolloutMeter(self.pool, [source.name for source in config.sources])
        self.probe(None)

    def __exit__(self, *exc: object) -> None:
        try:
            self._ends.__exit__(*exc)
        finally:
            self.log.close(failed=exc[0] is not None)

    def _clear(self) -> None:
        """A fresh run: remove what an earlier run in this folder left (only the job's own files)."""
        for name in (CHECKPOINTS, TB_DIR, EPISODES_DIR, PLOTS_DIR, TINY_FOLDER):
            shutil.rmtree(self.run_dir / name, ignore_errors=True)
        for name in (METRICS_FILE, REVERTED_FILE, SUMMARY_FILE, IDS_FILE):
            (self.run_dir / name).unlink(missing_ok=True)

    # -- trainer, checkpoints, state

    async def push_weights(self, group: TrainerGroup, version: int) -> None:
        """To every engine and, for replicas that restart, to their weights keepers; a replica that
        is down does not fail the push."""
        keepers = [k for k in map(weights_keeper, self.engines) if k is not None]
        merged = self.lora_push == "merged"  # a vLLM replica that does not serve the family's LoRA (docs/training.md)
        await asyncio.to_thread(group.push_weights, self.engines, version, keepers, merged)
        self.engine_version = version

    async def weight_pause_s(self) -> float:
        """The longest time one replica held requests back for weights since the last call
        (engines' ``weight_pause_s``); a replica that does not answer counts 0."""
        from ray.exceptions import RayError

        longest = 0.0
        for replica, engine in enumerate(self.engines):
            try:
                total = float((await engine.stats.remote()).get("weight_pause_s", 0.0))
            except RayError:
                continue
            # a restarted replica counts from 0 again
            longest = max(longest, total - min(self._pause_totals.get(replica, 0.0), total))
            self._pause_totals[replica] = total
        return longest

    async def served_version(self) -> int:
        """The lowest policy version the engine replicas serve (those that answer): what an
        evaluation measures. -1 when none answers."""
        from ray.exceptions import RayError

        versions = []
        for engine in self.engines:
            try:
                versions.append(int(await engine.policy_version.remote()))
            except RayError:
                continue
        return min(versions, default=-1)

    def checkpoint_dir(self, name: str) -> Path:
        path = self.run_dir / CHECKPOINTS / name
        shutil.rmtree(path, ignore_errors=True)
        return path

    def write_state(self, path: Path, state: RunState) -> None:
        """Written last: a checkpoint folder without it is incomplete and never resumed from."""
        write_checkpoint_state(path, {
            "step": state.step, "version": state.version, "generated": state.generated,
            "next_seeds": state.next_seeds, "open_seeds": state.open_seeds,
            "policy": state.policy, "checkpoint": state.checkpoint, "success": state.success,
        })  # fmt: skip

    def resumed_state(self) -> RunState | None:
        """The state of the newest intact checkpoint, or None (then the run starts afresh)."""
        newest = newest_checkpoint(self.run_dir)
        return None if newest is None else RunState(**read_checkpoint_state(newest))

    def branched_state(self, checkpoint: str) -> RunState:
        """The state of another run's checkpoint (``start_from``) for this fresh run, whose policy
        must be of this run's model family: its weights load into this run's engines."""
        state = RunState(**read_checkpoint_state(Path(checkpoint)))
        family = family_of(state.policy)
        if family.name != self.family.name:
            raise ConfigError(
                "start_from", checkpoint, f"a checkpoint of this run's model family ({self.family.name})", got=f"{family.name} at {state.policy}"
            )
        return state

    # -- store and what the progress line shows

    def delete(self, metas: list[SeqMeta]) -> None:
        delete_sequences(self.store, metas)

    def store_metrics(self) -> dict[str, float]:
        stats = self.store.stats()
        return {"store/bytes": stats.bytes, "store/keys": stats.keys}

    def probe(self, driver: Driver | None) -> None:
        def figures() -> dict[str, Any]:
            stats = self.store.stats()
            out = {"in_flight": self.pool.book.in_flight, "store_bytes": stats.bytes, "store_keys": stats.keys}
            if driver is not None:
                out.update({k: v for k, v in driver.book.report().items() if k != "reasons"})
            return out

        self.progress.probe = figures
