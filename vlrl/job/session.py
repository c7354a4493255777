"""What a ``vlrl train`` run holds while it lasts, and where it stands.

``JobSession`` builds and tears down the run's resources (run folder, logs and experiment
trackers, the progress line, model, engines, an OPD teacher, store, Harness Pool) and offers the
job what it needs from them: trainer groups, weight pushes, checkpoint folders, store clean-up
and figures.
``RunState`` is what ``state.json`` next to every checkpoint records for ``--resume``.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vlrl.config import ConfigError
from vlrl.control.driver import Driver
from vlrl.job.evaluate import Annotator
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
from vlrl.job.tracking import IDS_FILE
from vlrl.mm import delete_sequences
from vlrl.models import family_of
from vlrl.records import SeqMeta
from vlrl.rollout.engine import VLLMEngine
from vlrl.rollout.engine.vllm_lora import lora_push
from vlrl.rollout.engine.weights_keeper import weights_keeper
from vlrl.rollout.loop_setup import LoopSetup
from vlrl.rollout.rollout_side import TINY
from vlrl.train.lora import LoRA
from vlrl.train.loss import PolicyLoss
from vlrl.train.mismatch import engine_noise, lag0_threshold
from vlrl.train.optimizer import Optimizer
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



def trained_rate(config: Any, optim: Optimizer.Config) -> Optimizer.Config:
    """``optim`` at the rate the run trains at: a tiny build's scaled by ``tiny.rate_scale``."""
    if config.model_path != TINY:
        return optim
    return replace(optim, lr=optim.lr * config.tiny.resolved_rate_scale())


def guarded(config: Any, loss: PolicyLoss.Config) -> PolicyLoss.Config:
    """``loss`` with the lag-0 threshold of its mismatch guard set from the run's engine
    (``train.mismatch.lag0_threshold``) where the config leaves it None."""
    if loss.mismatch_warn_lag0 is not None:
        return loss
    return replace(loss, mismatch_warn_lag0=lag0_threshold(engine_noise(config.engine.dtype)))


class JobSession:
    """What a run holds while it lasts: run folder, model, engines, store, pool, logs; all of it
    is torn down (actors ended, store destroyed) when the ``with`` block ends."""

    def __init__(self, config: Any) -> None:
        """``config``: the run's ``TrainJob.Config``."""
        self.config = config
        self.run_dir = Path(config.run_dir).resolve()
        self.engine_version = 0
        self._pause_totals: dict[int, float] = {}

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
            self.log.close(failed=True)
            raise
        return self

    def _start(self) -> None:
        """Model, engines, teacher, store and pool: what ``__exit__`` ends."""
        import ray
        from transformers import AutoProcessor

        from vlrl.mm import patch_rule_of
        from vlrl.rollout.screen_history import check_older_image_tokens

        config = self.config
        self.model_path = self._model()
        self.family = family_of(self.model_path)
        """The policy's model family (the summary's ``model_family``)."""
        processor = AutoProcessor.from_pretrained(self.model_path)
        rule = patch_rule_of(processor)
        for i, source in enumerate(config.sources):  # before any engine starts
            if source.env.width and source.env.height:
                field = f"sources[{i}].agent.older_image_tokens"
                check_older_image_tokens(source.agent, rule, source.env.width, source.env.height, field)
        self.annotator = Annotator(processor.tokenizer, rule)
        engine = config.engine
        if config.loss.routing_replay == "rollout":  # the trainer replays what the engines record
            engine = replace(engine, record_routing=True)
        self.lora_push = None
        """Under LoRA, how pushes reach the engines: 'adapters' (the embedded engine merges them
        itself; vLLM serves them as a LoRA adapter) or 'merged' (every weight, adapters merged in)."""
        if config.lora.enabled:
            self.lora_push = "adapters"
            if isinstance(engine, VLLMEngine.Config):
                engine = replace(engine, lora_rank=config.lora.rank, lora_tower=config.lora.trains_tower)
                adapters, _ = lora_push(engine.lora_adapters, engine.lora_rank, self.family.name)  # each replica says why
                self.lora_push = "adapters" if adapters else "merged"
        self.engines = [engine.build(model_path=self.model_path) for _ in range(config.replicas)]
        self.teacher = None
        self.store = config.store.build()
        try:
            if config.teacher is not None:
                self.teacher = config.teacher.start(self.model_path)
            loop_setup = LoopSetup(self.model_path, tuple(self.engines), self.store, config.client)
            self.pool = config.pool.build(loop_setup=loop_setup)
        except BaseException:
            self._end_engines_and_store(ray)
            raise
        self.meter = RolloutMeter(self.pool, [source.name for source in config.sources])
        self.probe(None)

    def __exit__(self, *exc: object) -> None:
        import ray

        try:
            self.pool.shutdown()
        finally:
            self._end_engines_and_store(ray)
            self.log.close(failed=exc[0] is not None)

    def _end_engines_and_store(self, ray: Any) -> None:
        for engine in [*self.engines, *([self.teacher] if self.teacher is not None else [])]:
            ray.kill(engine)
        self.store.destroy()

    def _clear(self) -> None:
        """A fresh run: remove what an earlier run in this folder left (only the job's own files)."""
        for name in (CHECKPOINTS, TB_DIR, EPISODES_DIR, PLOTS_DIR, "model"):
            shutil.rmtree(self.run_dir / name, ignore_errors=True)
        for name in (METRICS_FILE, REVERTED_FILE, SUMMARY_FILE, IDS_FILE):
            (self.run_dir / name).unlink(missing_ok=True)

    def _model(self) -> str:
        if self.config.model_path != TINY:
            return self.config.model_path
        path = self.run_dir / "model"
        if not (path / "config.json").exists():
            self.config.tiny.build(path)
        return str(path)

    # -- trainer, checkpoints, state

    def trainer_group(
        self,
        model_path: str,
        *,
        optim: Optimizer.Config | None = None,
        loss: PolicyLoss.Config | None = None,
        steps: int | None = None,
        lora: LoRA.Config | None = None,
    ) -> TrainerGroup:
        """A trainer group on ``model_path`` for the RL stage (the run's ``optim``, ``loss``,
        ``steps`` and ``lora``), or for the warm start with its own in their place; a tiny
        build's rates scaled by ``tiny.rate_scale`` (its family's)."""
        c = self.config
        return c.trainer.build(
            model_path=model_path,
            store_config=c.store,
            layout=c.layout,
            optim=trained_rate(c, c.optim if optim is None else optim),
            loss=guarded(c, c.loss if loss is None else loss),
            micro_batches=c.micro_batches,
            steps=c.steps if steps is None else steps,
            lora=c.lora if lora is None else lora,
        )

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
