"""Train a GUI agent on MiniWoB++ tasks in real Chromium (Selenium).

    vlrl train examples/train_miniwob.py                # the real run (2 CPU cores: ~15 min, estimated)
    vlrl train examples/train_miniwob.py:small          # a 2-step smoke run (CI, about a minute)
    vlrl train examples/train_miniwob.py:every_task     # all 8 tasks the harness has an oracle for
    vlrl plot runs/train_miniwob                        # the plots and annotated episodes

Three one-click MiniWoB tasks whose target moves from seed to seed: click-test (the one button),
focus-text (the one text box) and click-dialog (the dialog's close box). The screen is MiniWoB's
160x210 task area at scale 1, which the tiny Qwen2-VL of ``train_click.py`` sees as 168x224 (48
image tokens). The reward is MiniWoB's own: 1 for a success, less the share of the episode's
time limit already spent; ``time_limit_s`` is raised from MiniWoB's 10 s to 30 s because the
clock runs while a batch of policies decodes on a loaded CPU. A warm start on oracle clicks
teaches the reply format and what each target looks like; GRPO then trains on groups of 8.
"""

from pathlib import Path

from vlrl.config import AgentBehaviour, DataSource, EnvSettings, load_recipe
from vlrl.job.demos import WarmStart
from vlrl.job.evaluate import Evaluation
from vlrl.job.train_job import TrainJob
from vlrl.pool import HostBudget
from vlrl.pool.host_config import HostConfig

MAIN_JOB = Path(__file__).with_name("train_click.py")
CLICK_TASKS = ["click-test", "focus-text", "click-dialog"]
"""One click on a target found by its look, not its label."""


def miniwob_source() -> DataSource:
    """The three click tasks at scale 1: one turn, one click."""
    return DataSource(
        name="miniwob",
        codebase="miniwob",
        agent=AgentBehaviour(max_turns=1, max_tokens=40, temperature=1.0, prompt_template="gui-agent-short"),
        env=EnvSettings(tasks=list(CLICK_TASKS), params={"scale": 1, "time_limit_s": 30.0}),
        group_size=8,
    )


def recipe() -> TrainJob.Config:
    """The main job's settings on three MiniWoB++ click tasks: warm start on 384 demonstrations,
    then 40 GRPO steps of 8 groups of 8."""
    config = load_recipe(f"{MAIN_JOB}:recipe")
    config.run_dir = "runs/train_miniwob"
    config.sources = [miniwob_source()]
    config.pool.budget = HostBudget(total_hosts=3, shares={"loop": 1, "miniwob": 2})
    config.pool.env_host = HostConfig(max_tenants=16)  # Chromium + ChromeDriver processes per env host
    config.driver.max_groups_in_flight = 8
    config.warm_start = WarmStart(episodes=384, steps=250, sequences_per_step=32, lr=1e-2, point_grid=7)
    config.steps = 40
    config.eval = Evaluation(episodes=96, every=10)
    return config


def small() -> TrainJob.Config:
    """Every stage at CI size: 6 demonstrations, 2 warm-start steps, 2 RL steps of 2 groups of 4."""
    config = recipe()
    config.run_dir = "runs/train_miniwob_small"
    config.pool.env_host = HostConfig(max_tenants=4)
    config.warm_start = WarmStart(episodes=6, steps=2, sequences_per_step=4, lr=1e-2, point_grid=7, continue_below_baseline=True)
    config.sources[0].group_size = 4
    config.driver.groups_per_batch = 2
    config.advantage.sampler.include_min = True
    config.advantage.drop_zero_advantage = False
    config.steps = 2
    config.eval = Evaluation(episodes=2, every=0, screenshots=1, constant_grid=(2, 2))
    config.checkpoint_every = 0
    return config


def every_task() -> TrainJob.Config:
    """All 8 tasks with an oracle, adding click-button and click-link (find the named one among
    others), click-checkboxes and the typing tasks enter-text and login-user (up to 5 turns)."""
    from harnesses.miniwob.harness import DEFAULT_TASKS

    config = recipe()
    config.run_dir = "runs/train_miniwob_every_task"
    source = config.sources[0]
    source.env.tasks = list(DEFAULT_TASKS)
    source.agent.max_turns = 6
    source.agent.max_tokens = 48
    return config
