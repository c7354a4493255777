"""Train a GUI agent on a web app in a real browser: the browser harness's form-fill app.

    vlrl train examples/train_web_app.py                # the real run (2 CPU cores: ~20 min, estimated)
    vlrl train examples/train_web_app.py:small          # a 2-step smoke run (CI, about a minute)
    vlrl train examples/train_web_app.py:mail           # form-fill and email-triage in one source
    vlrl plot runs/train_web_app                        # the plots and annotated episodes

Every episode runs in headless Chromium (Playwright) at 640x480, the size the apps are laid out
for (at 320x240 the todo and mail apps overflow the page sideways and their oracles cannot reach
their buttons). The form-fill app asks for a name, an email, a choice from a drop-down, the
"email updates" box ticked or not, then Submit: ~8 turns for the oracle (two of them ``type``),
reward 1 only if the page's own state holds the submitted values. The tiny Qwen2-VL of
``train_click.py`` sees each screenshot at 252x168 (54 image tokens); all earlier screenshots stay
in the prompt, so an episode is one sequence of ~900 tokens. A warm start on oracle
demonstrations teaches the reply format and the page's layout, GRPO then trains on groups of 4.

Browser steps take ~0.1 s each but every instance is a Chromium process: ``pool.env_host``
caps the instances per env host.
"""

from pathlib import Path

from vlrl.config import AgentBehaviour, DataSource, EnvSettings, load_recipe
from vlrl.job.demos import WarmStart
from vlrl.job.evaluate import Evaluation
from vlrl.job.train_job import TrainJob
from vlrl.pool import HostBudget
from vlrl.pool.host_config import HostConfig

MAIN_JOB = Path(__file__).with_name("train_click.py")


def web_source() -> DataSource:
    """form-fill at 640x480: ~8 oracle turns, four spare; typed emails run to ~45 reply tokens."""
    return DataSource(
        name="web-form",
        codebase="browser",
        agent=AgentBehaviour(max_turns=12, max_tokens=64, temperature=1.0, prompt_template="gui-agent-short"),
        env=EnvSettings(width=640, height=480, tasks=["form-fill"], max_steps=12),
        group_size=4,
    )


def recipe() -> TrainJob.Config:
    """The main job's settings on the form-fill app: warm start on 256 demonstrations, then 20
    GRPO steps of 8 groups of 4."""
    config = load_recipe(f"{MAIN_JOB}:recipe")
    config.run_dir = "runs/train_web_app"
    config.sources = [web_source()]
    config.pool.budget = HostBudget(total_hosts=3, shares={"loop": 1, "browser": 2})
    config.pool.env_host = HostConfig(max_tenants=8)  # Chromium processes per env host
    config.driver.max_groups_in_flight = 8
    config.warm_start = WarmStart(episodes=256, steps=200, sequences_per_step=8, lr=1e-2, point_grid=7)
    config.steps = 20
    config.eval = Evaluation(episodes=32, every=10)
    return config


def small() -> TrainJob.Config:
    """Every stage at CI size: 2 demonstrations, 1 warm-start step, 2 RL steps of one group of 2."""
    config = recipe()
    config.run_dir = "runs/train_web_app_small"
    config.pool.env_host = HostConfig(max_tenants=2)
    config.warm_start = WarmStart(episodes=2, steps=1, sequences_per_step=2, lr=1e-2, point_grid=7)
    config.sources[0].group_size = 2
    config.driver.groups_per_batch = 1
    config.advantage.sampler.include_min = True
    config.advantage.drop_zero_advantage = False
    config.steps = 2
    config.eval = Evaluation(episodes=1, every=0, screenshots=1, chance=False)
    config.checkpoint_every = 0
    return config


def mail() -> TrainJob.Config:
    """A second app in the same source: email-triage (open the named sender's mail, then star it,
    move it to a folder or reply; 2-4 oracle turns) beside form-fill, groups drawn from both."""
    config = recipe()
    config.run_dir = "runs/train_web_mail"
    config.sources[0].name = "web-apps"
    config.sources[0].env.tasks = ["form-fill", "email-triage"]
    return config
