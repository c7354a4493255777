"""What a recipe builds a run from, importable from one module, and the base recipe.

    from vlrl.recipes import DataSource, EnvSettings, AgentBehaviour, base_recipe

    def recipe():
        source = DataSource(name="mine", codebase="my-harness", env=EnvSettings(width=160, height=120))
        return base_recipe([source], run_dir="runs/mine")

Every config class a recipe sets is here under the name its ``--set`` selection uses
(``store=RayStore``); the modules they live in are implementation detail.

``TrainJob.Config()``'s own defaults (learning rate 1e-5, 65,536 tokens per micro-batch, no warm
start) are those of a real multi-billion-parameter checkpoint on GPUs. ``base_recipe`` instead
holds the settings measured to learn with the untrained tiny model on 2 CPU cores: the README's
main job is ``base_recipe`` on the click-target source (held-out success 0.00 -> 0.765 after the
warm start -> 0.87 after 50 GRPO steps, 401 s, `bash scripts/main.sh`).
"""

from __future__ import annotations

from encoders.spec import EncoderSpec
from vlrl.config import AgentBehaviour, Branching, DataSource, EnvSettings, ExternalAgent, Replay
from vlrl.control.driver import Driver
from vlrl.control.grader import GraderRunner
from vlrl.control.group_hook import GroupHook
from vlrl.control.penalties import OverlongPenalty
from vlrl.control.sampler import PassRateSampler
from vlrl.control.step_credit import StepCredit
from vlrl.job.demos import WarmStart
from vlrl.job.distill import Teacher
from vlrl.job.eval_job import EvalJob
from vlrl.job.evaluate import Evaluation
from vlrl.job.policy_rollout import PolicyRollout
from vlrl.job.progress import Progress
from vlrl.job.tracking import MlflowTracker, Tracking, WandbTracker
from vlrl.job.train_job import TrainJob
from vlrl.models import TinyModel
from vlrl.pack import MicroBatchPlanner
from vlrl.pack.cost import CostModel
from vlrl.pack.layout import Layout
from vlrl.pool import LOOP_POOL, HarnessPool, HostBudget, HostConfig
from vlrl.pool.ray_runtime import RayRuntime
from vlrl.pool.scripted_rollout import ScriptedRollout
from vlrl.rollout.client import InferenceClient
from vlrl.rollout.engine import EmbeddedEngine, VLLMEngine
from vlrl.rollout.external.teacher import ProgramTeacher
from vlrl.rollout.http_endpoint import OpenAIEndpoint
from vlrl.store import LocalStore
from vlrl.store.ray_store import RayStore
from vlrl.store.transferqueue_store import TransferQueueStore
from vlrl.train.lora import LoRA
from vlrl.train.loss import RL_DUAL_CLIP, PolicyLoss
from vlrl.train.optimizer import Optimizer
from vlrl.train.trainer import Trainer
from vlrl.train.trainer_group import TrainerGroup

__all__ = [
    "AgentBehaviour",
    "Branching",
    "CostModel",
    "DataSource",
    "Driver",
    "EmbeddedEngine",
    "EncoderSpec",
    "EnvSettings",
    "EvalJob",
    "ExternalAgent",
    "Evaluation",
    "GraderRunner",
    "GroupHook",
    "HarnessPool",
    "HostBudget",
    "HostConfig",
    "InferenceClient",
    "Layout",
    "LoRA",
    "LocalStore",
    "MicroBatchPlanner",
    "MlflowTracker",
    "OpenAIEndpoint",
    "Optimizer",
    "OverlongPenalty",
    "PassRateSampler",
    "PolicyLoss",
    "PolicyRollout",
    "ProgramTeacher",
    "Progress",
    "RL_DUAL_CLIP",
    "RayRuntime",
    "RayStore",
    "Replay",
    "ScriptedRollout",
    "StepCredit",
    "Teacher",
    "TinyModel",
    "Tracking",
    "TrainJob",
    "Trainer",
    "TrainerGroup",
    "TransferQueueStore",
    "VLLMEngine",
    "WandbTracker",
    "WarmStart",
    "base_recipe",
    "ci_size",
]


def base_recipe(sources: list[DataSource], *, run_dir: str = "runs/train") -> TrainJob.Config:
    """A training run on ``sources`` with the main job's settings (the tiny model, 2 CPU cores):
    a warm start on 512 oracle demonstrations (250 steps at lr 1e-2), then 50 GRPO steps on
    batches of 8 groups, held-out evaluation on 200 episodes per source every 10 steps. Each
    codebase gets an env pool of two hosts beside one loop host.

    The RL rate is 1e-4 when a source in ``sources`` takes more than one turn, else 1e-3 (set
    here: sources changed afterwards keep it). Measured from one warm start, multi-turn tasks
    unlearn at 1e-3 and hold or gain at 1e-4 (select-menu 0.23 -> 0.185 against 0.23 -> 0.265
    after 50 steps; form filling 0.89 -> 0.80 against 0.89 -> 0.95; ``docs/training.md``)."""
    codebases = dict.fromkeys(source.codebase for source in sources)
    shares = {LOOP_POOL: 1.0, **{codebase: 2.0 for codebase in codebases}}
    return TrainJob.Config(
        run_dir=run_dir,
        tiny=TinyModel(rope_theta=10.0),
        engine=EmbeddedEngine.Config(cpus=0, max_batch=32, torch_threads=2),
        pool=HarnessPool.Config(budget=HostBudget(total_hosts=1 + 2 * len(codebases), shares=shares)),
        sources=sources,
        driver=Driver.Config(groups_per_batch=8, max_staleness=1, max_groups_in_flight=16, prefetch_batches=1),
        advantage=GroupHook.Config(),
        optim=Optimizer.Config(lr=1e-4 if any(s.agent.max_turns > 1 for s in sources) else 1e-3),
        loss=PolicyLoss.Config(kind="grpo", dual_clip=RL_DUAL_CLIP),  # rollouts run ahead: bound stale tokens' weights
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=4096),
        trainer=TrainerGroup.Config(cpus_per_worker=1),
        warm_start=WarmStart(episodes=512, steps=250, sequences_per_step=32, lr=1e-2, point_grid=7),
        steps=50,
        eval=Evaluation(episodes=200, every=10),
        checkpoint_every=10,
    )


def ci_size(config: TrainJob.Config, run_dir: str, *, demonstrations: int, group_size: int) -> TrainJob.Config:
    """``config`` shrunk to a smoke run of every stage (CI): ``demonstrations`` for a 2-step warm
    start (RL follows whatever it reaches: a smoke run tests the stages, not learning), then 2 RL
    steps of 2 groups of ``group_size``, keeping the groups an untrained policy fails whole, and a
    2-episode final evaluation (its best-constant baseline from a 2 x 2 grid: 4 scripted episodes a
    seed, not 48)."""
    config.run_dir = run_dir
    config.warm_start = WarmStart(
        episodes=demonstrations, steps=2, sequences_per_step=4, lr=1e-2, point_grid=7, continue_below_baseline=True
    )
    for source in config.sources:
        source.group_size = group_size
    config.driver.groups_per_batch = 2
    config.advantage.sampler.include_min = True  # an untrained policy fails everything: keep such groups
    config.advantage.drop_zero_advantage = False
    config.steps = 2
    config.eval = Evaluation(episodes=2, every=0, screenshots=1, constant_grid=(2, 2))
    config.checkpoint_every = 0
    return config
