"""``vlrl train``: the end-to-end job. Harness Pool -> Agent Loops -> store -> driver -> packer ->
encoder path -> trainer -> weight sync, step after step, on one machine or a Ray cluster.

One RL step is ``rl_step.rl_step``, the one function that ``vlrl train``, ``vlrl bench chaos`` and
``vlrl bench async`` run::

    batch   <- driver.next_batch(version)        rollouts until every source has its share
    metrics <- trainer.step(batch.sequences)      ranks fetch their rows and pixels from the store
                                                  (rollouts for the next batches keep running)
    driver.consumed(batch)                        the batch's keys are deleted
    trainer.push_weights(engines, version + 1)    through the Ray object store

and then the job logs, maybe evaluates, maybe checkpoints (``TrainJob._rl_step``).

Before it, optionally, a supervised warm start (``WarmStart``): oracle demonstrations of every
source become training sequences in the store and a trainer with the ``sft`` loss fits them; its
checkpoint is where the RL stage starts. Held-out evaluations (``Evaluation``) run before
anything (``success_first``), after the warm start and every ``eval.every`` steps; the last one
gives ``success_last``. Before them the baselines (``job.baselines``: random clicks, the best
constant point, the oracle) are measured on the same seeds (in a ``start_from`` run too: the
summary's are always this run's own, never the other run's); a warm start whose held-out success
does not beat the best of them by more than one standard error stops the job before RL, saying
so with the figures, unless ``warm_start.continue_below_baseline``. The run folder holds
``metrics.jsonl``, TensorBoard events, checkpoints, annotated episode pictures and plots;
``resume=True`` (``vlrl train RECIPE --resume``) continues from its last checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from vlrl.config import ConfigError, Ge, NonEmpty
from vlrl.control.driver import Driver
from vlrl.control.group_hook import GroupHook
from vlrl.job.demos import WarmStart, demo_tenant, unkept_sources
from vlrl.job.distill import Teacher
from vlrl.job.baselines import KINDS, below_baseline, measure, overall
from vlrl.job.evaluate import EvalResult, Evaluation, evaluate
from vlrl.job.meters import CostMeter, batch_metrics, book_metrics
from vlrl.job.metrics_log import read_metrics
from vlrl.job.plots import EPISODES_DIR
from vlrl.job.progress import Progress
from vlrl.job.rl_step import rl_driver, rl_step
from vlrl.job.rollout_runtime import ray_for_run
from vlrl.job.run_folder import SUMMARY_FILE
from vlrl.job.run_plan import RunPlan, resolve
from vlrl.job.session import JobSession, RunState
from vlrl.job.tracking import Tracking
from vlrl.job.train_refusals import (
    check_demonstration_formats,
    check_external_sources,
    check_sampling,
    check_start_from,
    check_teacher,
    check_teacher_reachable,
)
from vlrl.pack import Layout, MicroBatchPlanner
from vlrl.pool.tenant import TenantOutcome, lost_writers
from vlrl.records import SeqMeta
from vlrl.rollout.engine import VLLMEngine
from vlrl.rollout.rollout_side import RolloutSide
from vlrl.train.loss import RL_DUAL_CLIP, PolicyLoss
from vlrl.train.optimizer import Optimizer
from vlrl.train.lora import LoRA
from vlrl.train.trainer_group import TrainerGroup

class TrainJob:
    @dataclass(kw_only=True, slots=True)
    class Config(RolloutSide):
        """An end-to-end RL run: rollouts on the Harness Pool, training, weight sync, evaluation."""

        driver: Driver.Config = field(default_factory=Driver.Config)
        """Batch shares, staleness and rollout concurrency."""

        advantage: GroupHook.Config = field(default_factory=GroupHook.Config)
        """What each finished group goes through before it may train: the pass-rate sampler
        (``advantage.sampler.include_min``), penalties, the estimator (``advantage.estimator``),
        step credit, or on-policy distillation (``advantage.mode='opd'``)."""

        steps: Annotated[int, Ge(0)] = 20
        """RL steps (one optimizer step and one weight push each)."""

        optim: Optimizer.Config = field(default_factory=Optimizer.Config)
        """The RL stage's optimizer: ``optim.lr``, ``optim.schedule`` (``cosine`` decays over
        ``steps``), weight decay, betas, gradient clipping. The warm start has its own ``lr`` and
        ``schedule`` and shares the rest."""

        loss: PolicyLoss.Config = field(default_factory=lambda: PolicyLoss.Config(kind="grpo", dual_clip=RL_DUAL_CLIP))
        """The RL stage's policy loss (``loss.kind``, ``loss.clip_low``, ``loss.tis_cap``, ...);
        the warm start trains with ``kind='sft'``. GRPO with negative-advantage tokens dual-clipped
        at ``RL_DUAL_CLIP`` (3): rollouts run ahead of training by default, so most tokens are one
        version old (``loss.dual_clip=null`` for plain PPO, ``loss.tis_cap`` for decoupled PPO)."""

        micro_batches: MicroBatchPlanner.Config = field(default_factory=MicroBatchPlanner.Config)
        """How a step's sequences are packed into micro-batches per DP rank
        (``micro_batches.max_tokens_per_micro_batch``)."""

        layout: Layout = field(default_factory=Layout)
        """The trainer's ranks as DP x CP x TP (and sequence parallelism): the one description of
        the mesh (``--set layout.dp=2``)."""

        lora: LoRA.Config = field(default_factory=LoRA.Config)
        """Low-rank adapters in place of full fine-tuning, in the RL stage and, unless
        ``warm_start.lora`` is False, the warm start (``--set lora.rank=16``; rank 0: every weight
        trains): only the adapters train, are pushed and get optimizer state; checkpoints add a
        PEFT adapter folder (docs/training.md)."""

        trainer: TrainerGroup.Config = field(default_factory=TrainerGroup.Config)
        """What every trainer rank loads and reserves (dtype, plug-in encoder, KL reference, Ray
        CPUs and GPUs); every rank loads the policy (``model_path``, or the warm start's checkpoint)."""

        eval: Evaluation = field(default_factory=Evaluation)
        """Held-out evaluation."""

        warm_start: WarmStart | None = None
        """Supervised warm start on oracle demonstrations before RL, or None to start RL from the model."""

        teacher: Teacher | None = None
        """On-policy distillation: the teacher checkpoint that scores every rollout of the RL stage
        (with ``advantage.mode='opd'`` or ``loss.opd_coef > 0``), or None."""

        checkpoint_every: Annotated[int, Ge(0)] = 10
        """RL steps between checkpoints (0: only at the end); the last one is kept."""

        run_dir: Annotated[str, NonEmpty()] = "runs/train"
        """Folder of the run's metrics, TensorBoard events, checkpoints, episode pictures and plots."""

        resume: bool = False
        """Continue the run in ``run_dir`` from its last checkpoint (else the folder starts afresh)."""

        start_from: str = ""
        """A checkpoint folder of another run (``runs/NAME/checkpoints/warm-start``, or an RL step's)
        that this fresh run starts from in place of the base evaluation and the warm start: its
        weights, step and task seeds, so that runs differing in one setting share one warm start.
        The checkpoint is evaluated first and never changed; ``resume`` prefers this run's own."""

        seed: Annotated[int, Ge(0)] = 0
        """Task seed of the first training group of each source."""

        progress: Progress.Config = field(default_factory=Progress.Config)
        """The status line on stderr."""

        tensorboard: bool = True
        """Also write TensorBoard events (needs the tensorboard package; JSONL is always written)."""

        tracking: Tracking = field(default_factory=Tracking)
        """Experiment trackers the metrics also go to: W&B (``tracking.wandb.project``), MLflow
        (``tracking.mlflow.experiment``); both off by default."""

        plots: bool = True
        """Write the PNG plots at the end (``vlrl plot RUN_DIR`` writes them on demand)."""

        def check(self) -> None:
            RolloutSide.check(self)  # (no zero-argument super() in a slots dataclass)
            engine_encoder = getattr(self.engine, "encoder", None)  # engines without the field run the tower
            if engine_encoder != self.trainer.encoder:
                raise ConfigError(
                    "engine.encoder",
                    engine_encoder,
                    f"the trainer's encoder (trainer.encoder = {self.trainer.encoder!r}):"
                    " rollouts must embed images as training does",
                    got=repr(engine_encoder),
                )
            self.plan()  # the layout, LoRA and routing replay checks
            try:
                self.driver.quotas(self.sources)
            except ConfigError as error:
                raise error.under("driver") from None
            check_teacher(self)
            check_sampling(self)
            check_start_from(self)
            check_external_sources(self)
            check_demonstration_formats(self)

        def preflight(self) -> None:
            """After validation, before Ray: the harnesses build, an agent program's teacher answers."""
            RolloutSide.preflight(self)
            check_teacher_reachable(self)

        def plan(self) -> RunPlan:
            """The run as it will run (``vlrl.job.run_plan``): what ``vlrl train --print-config
            --resolved`` prints and the job builds from."""
            return resolve(self)

        def build(self) -> TrainJob:
            return TrainJob(self)

    def __init__(self, config: TrainJob.Config, *, hold_first_push: bool = False) -> None:
        """``hold_first_push``: the first RL step's weight push waits until the driver holds the
        next batch (``rl_step(hold_push=True)``), so that batch is trained provably one version
        stale (``vlrl bench async`` at smoke size)."""
        self.config = config
        self.hold_first_push = hold_first_push

    def run(self) -> dict[str, Any]:
        """Run to the last step; prints the JSON summary as the last line of stdout and returns it."""
        config = self.config
        started = time.perf_counter()
        config.preflight()
        plan = config.plan()
        _maybe_report_rate_scale(plan)
        # Ray before the session: its trackers and every process they start are the run's too
        with ray_for_run(config.ray), JobSession(config, plan) as session:
            summary = asyncio.run(self._main(session, started))
        print(json.dumps(summary), flush=True)
        return summary

    # -- the stages -------------------------------------------------------------------------

    async def _main(self, s: JobSession, started: float) -> dict[str, Any]:
        config = self.config
        async with s.progress:
            state = s.resumed_state() if config.resume else None
            if state is not None:
                s.log.rewind(state.step)
            branched = state is None and bool(config.start_from)
            if branched:
                state = s.branched_state(config.start_from)
                for kind in (*KINDS, "best"):  # the other run's, on its own sources and seeds: never this run's
                    state.success.pop(kind, None)
                await self._maybe_baselines(s, state)
            below = stopped = ""
            if state is None:
                state = RunState(policy=s.model_path)
                await self._maybe_baselines(s, state)
                await self._evaluate(s, state, "base")
                if config.warm_start is not None:
                    await self._warm_start(s, state)
                    below = self._below_baseline(state)
            if below and config.warm_start.continue_below_baseline:
                print(f"vlrl train: {below}; going on (warm_start.continue_below_baseline)", file=sys.stderr, flush=True)
            elif below:
                stopped = f"{below}. Stopped before RL; warm_start.continue_below_baseline=true runs RL anyway"
            if not stopped:
                await self._rl(s, state, evaluate_first=branched)
                await self._evaluate(s, state, "final")
        if stopped:
            print(f"vlrl train: {stopped}", file=sys.stderr, flush=True)
        summary = _summary(config, state, s, time.perf_counter() - started)
        if below:
            summary["warm_start_below_baseline"] = below
        if stopped:
            summary["stopped"] = stopped
        s.log.log(state.step, "summary", summary)
        (s.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2))
        if config.plots:
            from vlrl.job.plots import plot_run

            summary["plots"] = [str(p) for p in plot_run(s.run_dir)]
        return summary

    async def _warm_start(self, s: JobSession, state: RunState) -> None:
        """Fit oracle demonstrations with the sft loss; the RL stage starts from the result."""
        ws = self.config.warm_start
        demos = await self._demonstrations(s, ws)
        s.progress.phase("warm-start", total=ws.steps, unit="step")
        plan = s.plan
        group = plan.trainer.build(plan.warm_start, model_path=s.model_path, store_config=self.config.store, layout=plan.layout)
        try:
            order: list[SeqMeta] = []
            rng = random.Random(ws.seed)
            per_step = min(ws.sequences_per_step, len(demos))
            for step in range(1, ws.steps + 1):
                if len(order) < per_step:  # a new epoch: every demonstration once, shuffled
                    order += rng.sample(demos, len(demos))
                batch, order = order[:per_step], order[per_step:]
                metrics = await asyncio.to_thread(group.step, batch)
                s.log.log(step, "warm-start", {f"train/{k}": v for k, v in metrics.items()})
                s.progress.advance(loss=metrics["loss"], tokens_per_s=metrics["tokens_per_s"])
                if should_evaluate(step, ws.eval_every, ws.steps):  # the end's evaluation follows anyway
                    state.version += 1
                    await s.push_weights(group, state.version)
                    await self._evaluate(s, state, f"warm-step{step}", phase="warm-start", step=step)
                    s.progress.phase("warm-start", total=ws.steps, unit="step", initial=step)
            path = s.checkpoint_dir("warm-start")
            await asyncio.to_thread(group.save, path, {"stage": "warm-start"})
            state.version += 1
            await s.push_weights(group, state.version)
        finally:
            group.shutdown()
            s.delete(demos)
        state.policy = str(path / "hf")
        s.write_state(path, state)
        await self._evaluate(s, state, "warm")

    async def _demonstrations(self, s: JobSession, ws: WarmStart) -> list[SeqMeta]:
        jobs = []
        for source in self.config.sources:
            for k in range(ws.episodes):
                episode = demo_tenant(source, ws.seed + k, ws)
                jobs.append((episode, {"codebase": source.env_pool, "env_settings": source.env.as_kwargs()}))
        s.progress.phase("demonstrations", total=len(jobs), unit="episode")
        outcomes = await asyncio.gather(*(s.progress.counted(s.pool.run(tenant, **kwargs)) for tenant, kwargs in jobs))
        s.store.take_back(lost_writers(outcomes))  # what runs wrote before their loop host died
        demos = [m for o in outcomes if o.status == "ok" for m in o.value.metas]
        dropped = Counter(o.value.reason if o.status == "ok" else _cause(o) for o in outcomes)
        dropped.pop("", None)
        s.log.log(0, "warm-start", {"demos/sequences": len(demos), "demos/episodes": len(jobs), "demos/dropped": dict(dropped)})
        if none_kept := unkept_sources(self.config.sources, [tenant for tenant, _ in jobs], outcomes):
            s.delete(demos)
            raise RuntimeError(f"warm start: {none_kept}")
        if not demos:
            failed = next((o for o in outcomes if o.status != "ok"), None)
            example = f"; one of them in full:\n{failed.error}" if failed is not None else ""
            raise RuntimeError(
                f"warm start: no demonstration succeeded ({dict(dropped)}); set warm_start=None{example}"
            )
        return demos

    async def _rl(self, s: JobSession, state: RunState, *, evaluate_first: bool = False) -> None:
        """``evaluate_first``: evaluate the policy the stage starts from, once the engines hold it
        (a run started from another run's checkpoint)."""
        config = self.config
        if state.step >= config.steps and state.version <= s.engine_version:
            return
        s.progress.phase("rl", total=config.steps, unit="step", initial=state.step)
        plan = s.plan
        group = plan.trainer.build(plan.rl, model_path=state.policy, store_config=config.store, layout=plan.layout)
        try:
            if state.checkpoint:
                await asyncio.to_thread(group.load, state.checkpoint)
            if state.version > s.engine_version:  # a resumed run: the fresh engines hold the base weights
                await s.push_weights(group, state.version)
            if evaluate_first:
                await self._evaluate(s, state, "warm" if state.step == 0 else f"step{state.step}")
            if state.step >= config.steps:  # a finished run resumed: its final evaluation needs its weights
                return
            generated_before = state.generated
            # a state.json without next_seeds starts each source after the groups generated
            driver = rl_driver(s, seed=state.next_seeds or config.seed + state.generated, replay=state.open_seeds)
            s.probe(driver)
            costs = CostMeter(s.engines, s.store)
            try:
                while state.step < config.steps:
                    await self._rl_step(s, state, driver, group, costs)
                    state.generated = generated_before + driver.book.generated
                    if should_checkpoint(state.step, config.checkpoint_every, config.steps):
                        state.next_seeds, state.open_seeds = driver.seeds.next_seeds, driver.seeds.open_seeds()
                        await self._checkpoint(s, state, group)
            finally:
                await driver.close()
                state.generated = generated_before + driver.book.generated
                # what disagreed in the books, each line naming its counter ([]: exact)
                state.group_books = {**driver.book.report(), "drift": driver.books_drift()}
        finally:
            group.shutdown()

    async def _rl_step(
        self, s: JobSession, state: RunState, driver: Driver, group: TrainerGroup, costs: CostMeter
    ) -> None:
        hold = self.hold_first_push and state.step == 0
        done = await rl_step(s, driver, group, state.version, hold_push=hold, last=state.step + 1 >= self.config.steps)
        batch, metrics = done.batch, done.metrics
        state.version += 1
        state.step += 1
        paused = await s.weight_pause_s()
        record = {
            **{f"train/{k}": v for k, v in metrics.items()},
            **s.meter.take(),
            **batch_metrics(batch, state.version - 1),
            **book_metrics(driver.book),
            **({f"replay/{k}": v for k, v in driver.replay.book.report().items()} if driver.replay.config else {}),
            **s.store_metrics(),
            **await costs.take(),
            "batch/group_ids": [g.group_id for g in batch.groups],
            "policy_version": state.version,
            "time/rollout_wait_s": done.rollout_wait_s,
            "time/train_s": done.train_s,
            "time/weight_sync_s": done.weight_sync_s,
            "time/weight_pause_s": paused,
            "time/step_s": done.rollout_wait_s + done.train_s + done.weight_sync_s,
        }
        s.log.log(state.step, "rl", record)
        passed = {"pass_rate": record["rollout/pass_rate"]} if "rollout/pass_rate" in record else {}
        s.progress.advance(tokens_per_s=metrics["tokens_per_s"], **passed)
        if should_evaluate(state.step, self.config.eval.every, self.config.steps):
            await self._evaluate(s, state, f"step{state.step}")
            await costs.take()  # the evaluation's requests are not the training rollouts' cost

    async def _checkpoint(self, s: JobSession, state: RunState, group: TrainerGroup) -> None:
        """Save the trainer and the run state; the previous RL checkpoint is removed."""
        path = s.checkpoint_dir(_step_name(state.step))
        await asyncio.to_thread(group.save, path, {"step": state.step, "version": state.version})
        previous, state.checkpoint = state.checkpoint, str(path)
        s.write_state(path, state)
        own = Path(previous).parent == path.parent  # not the checkpoint a branched run started from
        if previous and own and Path(previous).name.startswith("step-") and Path(previous) != path:
            shutil.rmtree(previous, ignore_errors=True)

    async def _evaluate(self, s: JobSession, state: RunState, tag: str, *, phase: str = "eval", step: int | None = None) -> EvalResult:
        """``phase``, ``step``: where the record goes (a warm start's own evaluations are logged
        with its steps, beside its loss)."""
        config = self.config
        pictures = tag in ("base", "warm", "final")
        with s.progress.phase(f"eval {tag}", total=len(config.sources) * config.eval.episodes, unit="episode"):
            result = await evaluate(
                s.pool, s.store, config.sources, config.eval, tag=tag,
                annotator=s.annotator if pictures else None, screenshot_dir=s.run_dir / EPISODES_DIR,
                progress=s.progress,
            )  # fmt: skip
            state.success[tag] = result.success
            record = {"tag": tag, "policy_version": await s.served_version(), **result.metrics()}
            s.log.log(state.step if step is None else step, phase, record)
            s.progress.set(eval=result.success)
        return result

    async def _maybe_baselines(self, s: JobSession, state: RunState) -> None:
        """The baselines on the held-out seeds, once (``eval.chance``), in ``state.success``
        (``chance``, ``constant``, ``oracle``, ``best``) and one ``eval`` record tagged ``baselines``."""
        evaluation = self.config.eval
        if not evaluation.chance:
            return
        started = time.perf_counter()
        with s.progress.phase("eval baselines"):
            teacher = None if self.config.warm_start is None else self.config.warm_start.teacher
            per_source = await measure(
                s.pool, self.config.sources, seed=evaluation.seed, episodes=evaluation.episodes,
                grid=evaluation.constant_grid, teacher=teacher,
            )  # fmt: skip
        both = overall(per_source)
        state.success.update(both)
        record: dict[str, Any] = {"tag": "baselines", **{f"eval/{kind}": v for kind, v in both.items()}}
        record["eval/baseline_seeds"] = [evaluation.seed, evaluation.seed + evaluation.episodes - 1]
        record["time/baselines_s"] = round(time.perf_counter() - started, 2)
        for name, found in per_source.items():
            for kind in ("chance", "constant", "oracle", "constant_point", "failed"):
                record[f"eval/{name}/{kind}"] = found[kind]
            for task, figures in found["tasks"].items():
                record.update({f"eval/{name}/tasks/{task}/{kind}": v for kind, v in figures.items()})
        s.log.log(0, "eval", record)

    def _below_baseline(self, state: RunState) -> str:
        """What the job says when the warm start's held-out success did not beat the best baseline
        by more than one standard error ('' when it did, or when no baseline was measured)."""
        if "best" not in state.success or "warm" not in state.success:
            return ""
        episodes, sources = self.config.eval.episodes, len(self.config.sources)
        below = below_baseline(state.success["warm"], state.success, episodes=episodes, sources=sources)
        return below and f"warm start: {below}; RL from a policy that has not learnt the screen seldom learns it (docs/training.md)"


def _maybe_report_rate_scale(plan: RunPlan) -> None:
    """Say on stderr when a tiny build trains at other rates than the config's (``RunPlan.rate_scale``)."""
    if plan.rate_scale == 1:
        return
    rates = [f"optim.lr {plan.rl.rank.optim.lr:g}"]
    if plan.warm_start is not None:
        rates.insert(0, f"warm_start.lr {plan.warm_start.rank.optim.lr:g}")
    print(
        f"vlrl train: the tiny {plan.family} build trains at {plan.rate_scale:g}x the rates (tiny.rate_scale): {', '.join(rates)}",
        file=sys.stderr, flush=True,
    )  # fmt: skip


def should_evaluate(step: int, every: int, steps: int) -> bool:
    """Every ``every`` steps, except the last: the final evaluation follows it anyway."""
    return bool(every) and step % every == 0 and step < steps


def should_checkpoint(step: int, every: int, steps: int) -> bool:
    """Every ``every`` steps, and after the last."""
    return step == steps or (bool(every) and step % every == 0)


def _step_name(step: int) -> str:
    return f"step-{step:06d}"


def _summary(config: TrainJob.Config, state: RunState, s: JobSession, wall_s: float) -> dict[str, Any]:
    records = read_metrics(s.run_dir)
    evals = [r for r in records if r.get("phase") == "eval" and "eval/success" in r]
    first = next((r for r in evals if r.get("tag") == "base"), evals[0] if evals else {})
    last = evals[-1] if evals else {}
    warm = [r for r in evals if r.get("tag") == "warm"]
    bars = next((r for r in records if r.get("tag") == "baselines"), {})
    per_source = {}
    for source in config.sources:
        name = source.name
        figures: dict[str, Any] = {
            "success_first": first.get(f"eval/{name}/success"),
            "success_last": last.get(f"eval/{name}/success"),
            **{kind: bars.get(f"eval/{name}/{kind}") for kind in ("chance", "constant", "constant_point", "oracle")},
        }
        tasks = sorted({k.split("/")[3] for r in (first, last, bars) for k in r if k.startswith(f"eval/{name}/tasks/")})
        figures["tasks"] = {
            task: {
                "success_first": first.get(f"eval/{name}/tasks/{task}/success"),
                "success_last": last.get(f"eval/{name}/tasks/{task}/success"),
                **{kind: bars.get(f"eval/{name}/tasks/{task}/{kind}") for kind in ("chance", "constant", "oracle")},
            }
            for task in tasks
        }
        per_source[name] = figures
    return {
        "success_first": first.get("eval/success"),
        "success_warm_start": warm[-1]["eval/success"] if warm else None,
        "success_last": last.get("eval/success"),
        # this run's own baselines record (a resumed run keeps it), never a start_from run's
        "success_chance": bars.get("eval/chance"),
        "success_constant": bars.get("eval/constant"),
        "success_oracle": bars.get("eval/oracle"),
        "baseline_seeds": bars.get("eval/baseline_seeds"),
        "steps": state.step,
        "wall_s": round(wall_s, 1),
        "sources": per_source,
        "eval_episodes_per_source": config.eval.episodes,
        "groups": state.group_books,
        "store_keys_left": s.store.stats().keys,
        "run_dir": str(s.run_dir),
        "model": config.model_path,
        "model_family": s.family.name,
        "engine": "vllm" if isinstance(config.engine, VLLMEngine.Config) else "embedded",
        **({"lora_push": s.lora_push} if s.lora_push else {}),
    }


def _cause(outcome: TenantOutcome) -> str:
    """A failed run's status and the first line of its error, whole: failures group by cause."""
    return f"{outcome.status}: {(outcome.error or '').splitlines()[0] if outcome.error else 'no error'}"
