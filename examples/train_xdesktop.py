"""Train a computer-use agent on a real Linux desktop: real applications, tasks checked by the
files they leave behind.

    vlrl train examples/train_xdesktop.py            # the real run (2 CPU cores: ~19 min measured)
    vlrl train examples/train_xdesktop.py:small      # a 2-step smoke run (CI, about a minute)
    vlrl train examples/train_xdesktop.py:suite      # every family as a held-out evaluation suite

The xdesktop harness (``harnesses/xdesktop``): every instance runs its own Xvfb display at
640x480 with openbox and the task's application in a fresh sandbox home folder. The recipe trains
on the simplest family, ``editor-write-save``: Mousepad is open on a new file; the goal names a
three-word phrase; the oracle types it and presses ctrl+s; the reward is 1 only if the file on
disk holds exactly that phrase. The policy (the tiny Qwen2-VL of ``train_click.py``) must copy
the phrase out of the goal into a ``type`` action and then save: two turns, one sequence.

The warm start's demonstrations are the oracle's turns written as replies; GRPO then trains on
groups of 8 episodes. Measured on 2 cores (64 held-out episodes): 200 steps on 256
demonstrations left the policy at 0.02 (it typed words of other phrases), and RL then saw only
all-fail groups, which the pass-rate sampler rejects; the recipe's 400 steps on 512 reach 0.45,
and its 30 GRPO steps then 0.66 (chance 0.00; 19 min in all). Each instance is a real X server and application (~130 MB), so env hosts hold a few
instances each (``pool.env_host.max_tenants``).
"""

from pathlib import Path

from vlrl.config import AgentBehaviour, DataSource, EnvSettings, load_recipe
from vlrl.job.demos import WarmStart
from vlrl.job.evaluate import Evaluation
from vlrl.job.train_job import TrainJob
from vlrl.pool import HostBudget
from vlrl.pool.host_config import HostConfig
from vlrl.recipes import ci_size

MAIN_JOB = Path(__file__).with_name("train_click.py")
TRAINED = ["editor-write-save"]
"""The families the recipe trains on (the simplest: type and save)."""


def xdesktop_source(tasks: list[str], name: str = "xdesktop") -> DataSource:
    """xdesktop tasks at 640x480: up to four turns (the simplest families take two)."""
    return DataSource(
        name=name,
        codebase="xdesktop",
        agent=AgentBehaviour(max_turns=4, max_tokens=48, temperature=1.0, prompt_template="gui-agent-short"),
        env=EnvSettings(width=640, height=480, tasks=tasks, max_steps=4),
        group_size=8,
    )


def recipe() -> TrainJob.Config:
    """The main job's settings on editor-write-save: warm start on 512 demonstrations (400 steps),
    then 30 GRPO steps of 8 groups."""
    config = load_recipe(f"{MAIN_JOB}:recipe")
    config.run_dir = "runs/train_xdesktop"
    config.sources = [xdesktop_source(TRAINED)]
    config.pool.budget = HostBudget(total_hosts=3, shares={"loop": 1, "xdesktop": 2})
    config.pool.env_host = HostConfig(max_tenants=4)  # X servers per env host
    config.driver.max_groups_in_flight = 4
    config.warm_start = WarmStart(episodes=512, steps=400, sequences_per_step=16, lr=1e-2, point_grid=7)
    config.steps = 30
    config.eval = Evaluation(episodes=64, every=10)
    return config


def small() -> TrainJob.Config:
    """Every stage at CI size: 4 demonstrations, 2 warm-start steps, 2 RL steps of 2 groups of 2."""
    return ci_size(recipe(), "runs/train_xdesktop_small", demonstrations=4, group_size=2)


def suite() -> TrainJob.Config:
    """Every family as a held-out evaluation suite, one source each: a warm start on every
    family's demonstrations, no RL steps, then 32 held-out episodes per family (per-family
    success in the summary's ``sources``)."""
    from harnesses.xdesktop.tasks import FAMILIES

    config = recipe()
    config.run_dir = "runs/xdesktop_suite"
    config.sources = [xdesktop_source([family], name=family) for family in FAMILIES]
    config.driver.groups_per_batch = len(config.sources)  # a share for every source (no RL step runs)
    config.steps = 0
    config.eval = Evaluation(episodes=32, every=0)
    return config
