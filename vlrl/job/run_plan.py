"""The run plan: a training job's config resolved once into what will run, before anything starts.

A recipe and ``--set`` write settings; several of them only take their final form together.
``resolve`` is the one place where they do, and returns a frozen ``RunPlan`` (``vlrl.config.frozen``:
no component can change a setting in it afterwards):

1. each stage's trainer (``TrainerGroup.Stage``): the ``trainer`` section's model fields with the
   job's ``optim``, ``loss``, ``micro_batches`` and ``lora``; for the warm start its own ``lr``,
   ``schedule`` and ``steps``, the ``sft`` loss, and the adapters only with ``warm_start.lora``;
   a tiny build's rates times ``tiny.rate_scale`` (its family's unless set); the loss's lag-0
   mismatch threshold from the engine's dtype where the recipe leaves it None;
2. the engine as it will run: recording expert routing for ``loss.routing_replay='rollout'``, a
   vLLM replica's LoRA room, and how weight pushes reach the engines under LoRA (``lora_push``);
3. the layout, checked once against the model family; LoRA against the layout, the encoder and
   the checkpoint's modules; routing replay against the family and the engine.

``TrainJob.Config.check`` resolves the plan, so a bad layout is named at ``--set`` time;
``TrainJob.run`` builds the session and every trainer group from the plan it resolves;
``vlrl train RECIPE --print-config --resolved`` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from vlrl.config import ConfigError
from vlrl.config.frozen import freeze
from vlrl.job.train_refusals import check_routing_replay
from vlrl.models import ModelFamily, family, family_of
from vlrl.pack import Layout
from vlrl.rollout.engine import EmbeddedEngine, VLLMEngine
from vlrl.rollout.engine.vllm_lora import lora_push
from vlrl.rollout.rollout_side import TINY
from vlrl.train.lora import LoRA
from vlrl.train.loss import PolicyLoss
from vlrl.train.mismatch import engine_noise, lag0_threshold
from vlrl.train.optimizer import Optimizer
from vlrl.train.trainer import RankModel, Trainer
from vlrl.train.trainer_group import TrainerGroup

if TYPE_CHECKING:
    from vlrl.job.train_job import TrainJob

TINY_FOLDER = "model"
"""Where in ``run_dir`` a run builds its tiny model."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RunPlan:
    """A ``vlrl train`` run as it will run: every setting below is final and frozen."""

    model_path: str
    """The policy checkpoint the engines and the first trainer load: the recipe's ``model_path``,
    or the tiny build's folder in ``run_dir`` (built when the run starts)."""
    family: str
    """The policy's model family."""
    rate_scale: float
    """What the recipe's learning rates are multiplied by in both stages: the tiny build's
    ``tiny.rate_scale`` (its family's unless set), 1 for a checkpoint."""
    layout: Layout
    """The trainer's ranks (checked against the family, and against LoRA)."""
    trainer: TrainerGroup.Config
    """What every rank loads and reserves: the recipe's ``trainer`` section."""
    warm_start: TrainerGroup.Stage | None
    """The warm start's trainer: its rate as the optimizer gets it, the ``sft`` loss, its steps;
    None without a warm start or with ``start_from``."""
    rl: TrainerGroup.Stage
    """The RL stage's trainer: ``optim`` at the rate the optimizer gets, the loss with its mismatch
    threshold, micro-batching, LoRA, ``steps``."""
    engine: EmbeddedEngine.Config | VLLMEngine.Config
    """Every engine replica's config as it is built."""
    lora_push: Literal["adapters", "merged"] | None
    """Under LoRA, how pushes reach the engines: 'adapters' (the embedded engine merges them itself;
    vLLM serves them as a LoRA adapter) or 'merged' (every weight, the adapters merged in); None
    without LoRA."""


def resolve(config: TrainJob.Config) -> RunPlan:
    """``config`` as it will run (the module docstring's steps); ``ConfigError`` naming the field
    of a layout or LoRA setting the model cannot train under."""
    tiny = config.model_path == TINY
    policy = family(config.tiny.family) if tiny else family_of(config.model_path)
    checkpoint = None if tiny else config.model_path  # the tiny build is made when the run starts
    _check_layout(config.layout, policy, checkpoint)
    check_routing_replay(config, policy)
    if config.lora.enabled:
        config.lora.check_fits(config.layout, config.trainer.encoder)
        if checkpoint is not None:  # the tiny build's trainer checks the patterns once it is built
            try:
                config.lora.check_model(checkpoint)
            except ConfigError as error:
                raise error.under("lora") from None
    scale = config.tiny.resolved_rate_scale() if tiny else 1.0
    noise = engine_noise(config.engine.dtype)

    def stage(optim: Optimizer.Config, loss: PolicyLoss.Config, lora: LoRA.Config, steps: int) -> TrainerGroup.Stage:
        if loss.mismatch_warn_lag0 is None:
            loss = replace(loss, mismatch_warn_lag0=lag0_threshold(noise))
        model = {f.name: getattr(config.trainer, f.name) for f in fields(RankModel)}
        rank = Trainer.Config(
            **model, optim=replace(optim, lr=optim.lr * scale), loss=loss, micro_batches=config.micro_batches, lora=lora
        )
        return TrainerGroup.Stage(rank=rank, steps=steps)

    warm = None
    if config.warm_start is not None and not config.start_from:
        ws = config.warm_start
        optim = replace(config.optim, lr=ws.lr, schedule=ws.schedule)  # the rest of optim is shared
        warm = stage(optim, PolicyLoss.Config(kind="sft"), config.lora if ws.lora else LoRA.Config(), ws.steps)
    engine, push = _engine(config, policy)
    return freeze(RunPlan(
        model_path=str(Path(config.run_dir).resolve() / TINY_FOLDER) if tiny else config.model_path,
        family=policy.name, rate_scale=scale, layout=config.layout, trainer=config.trainer, warm_start=warm,
        rl=stage(config.optim, config.loss, config.lora, config.steps), engine=engine, lora_push=push,
    ))  # fmt: skip


def _check_layout(layout: Layout, policy: ModelFamily, checkpoint: str | None) -> None:
    """What the trainer needs of the layout beyond its sizes, and what the family's LLM trains
    under (``checkpoint``: None for the tiny build); ConfigError under ``layout``."""
    try:
        if layout.tp > 1 and not layout.sequence_parallel:
            raise ConfigError(
                "sequence_parallel", layout.sequence_parallel,
                f"True, since tp = {layout.tp} > 1: the trainer runs tensor parallelism only with sequence parallelism",
            )  # fmt: skip
        policy.check_layout(layout, checkpoint)
    except ConfigError as error:
        raise error.under("layout") from None


def _engine(config: TrainJob.Config, policy: ModelFamily) -> tuple[EmbeddedEngine.Config | VLLMEngine.Config, str | None]:
    """The engine config every replica is built from, and the LoRA push (None without LoRA)."""
    engine = config.engine
    if config.loss.routing_replay == "rollout":  # the trainer replays what the engines record
        engine = replace(engine, record_routing=True)
    if not config.lora.enabled:
        return engine, None
    if not isinstance(engine, VLLMEngine.Config):
        return engine, "adapters"
    engine = replace(engine, lora_rank=config.lora.rank, lora_tower=config.lora.trains_tower)
    adapters, _ = lora_push(engine.lora_adapters, engine.lora_rank, policy)  # each replica says why
    return engine, "adapters" if adapters else "merged"
