"""Train a GUI agent on a multi-turn desktop task: fill in a form, tick a box, submit.

    vlrl train examples/train_desktop_form.py            # the real run (2 CPU cores: 13 min, 0.94 held-out)
    vlrl train examples/train_desktop_form.py:step_credit  # the same run with step-level credit
    vlrl train examples/train_desktop_form.py:step_credit --set start_from=runs/train_desktop_form/checkpoints/warm-start
                                                         # step-level credit on the first run's warm start
    vlrl train examples/train_desktop_form.py:small      # a 2-step smoke run (CI, about a minute)
    vlrl plot runs/train_desktop_form                    # the plots and annotated episodes

The desktop harness's ``fill-form`` family at 160x120, without decoy check boxes: a window with a
Name and an Email field, one check box and Submit / Cancel. The goal names the values; the oracle
solves it in six turns (click Name, type the name, click Email, type the email, tick the box,
click Submit), and the reward is 1 only if the form was submitted holding exactly those values.
The policy must find each widget in the screenshot and copy the right string out of the goal
into a ``type`` action; every earlier screenshot and reply stays in its prompt, so an episode is
one training sequence of ~500 tokens.

The policy is the tiny Qwen3-VL (``tiny.family='qwen3_vl'``, M-RoPE base 100, the task's words
whole in its tokenizer), not the main job's tiny Qwen2-VL: that one learns every click but types a
name it memorised, and no base or rate measured let it copy (``docs/lab/training-runs.md``, "what
limits form filling"; ``examples/probe_copying.py``). The warm start trains on the oracle's six turns
written as replies (points on the 7-pixel grid, typed text verbatim) at lr 1e-3; GRPO then trains
on groups of 8 episodes per form at lr 1e-4. Measured on 2 cores, 100 held-out forms (greedy):
0.00 before, 0.89 after the warm start (7.6 min), 0.92, 0.94, 0.94 and 0.94 after 5, 10, 15 and
20 GRPO steps; 788 s in all. RL at the main job's rate (1e-3) ended at 0.80 from the same warm
start, and step-level credit where GRPO did (``docs/lab/training-runs.md``, "the RL stage after
the warm start").
"""

from pathlib import Path

from harnesses.desktop.words import vocabulary
from vlrl.config import AgentBehaviour, DataSource, EnvSettings, load_recipe
from vlrl.control.step_credit import StepCredit
from vlrl.job.demos import WarmStart
from vlrl.job.evaluate import Evaluation
from vlrl.job.train_job import TrainJob
from vlrl.models import TinyModel
from vlrl.recipes import ci_size

MAIN_JOB = Path(__file__).with_name("train_click.py")


def form_source() -> DataSource:
    """fill-form at 160x120 with no decoy boxes: six turns for the oracle, two spare."""
    return DataSource(
        name="desktop-form",
        codebase="desktop",
        agent=AgentBehaviour(max_turns=8, max_tokens=48, temperature=1.0, prompt_template="gui-agent-short"),
        env=EnvSettings(width=160, height=120, tasks=["fill-form"], max_steps=8, params={"distractors": 0}),
        group_size=8,
    )


def recipe() -> TrainJob.Config:
    """The main job's settings on fill-form, with the tiny Qwen3-VL: warm start on 512
    demonstrations (3,072 turns) at lr 1e-3, then 20 GRPO steps of 8 groups at lr 1e-4."""
    config = load_recipe(f"{MAIN_JOB}:recipe")
    config.run_dir = "runs/train_desktop_form"
    config.tiny = TinyModel(family="qwen3_vl", rope_theta=100.0, words=vocabulary())
    config.sources = [form_source()]
    config.driver.max_groups_in_flight = 8
    config.warm_start = WarmStart(episodes=512, steps=400, sequences_per_step=16, lr=1e-3, point_grid=7)
    config.optim.lr = 1e-4  # at the warm start's 1e-3, Adam's first steps undo it (docs/lab)
    config.steps = 20
    config.eval = Evaluation(episodes=100, every=5)
    return config


def step_credit() -> TrainJob.Config:
    """``recipe`` with step-level credit on the same seeds, warm start and budget."""
    config = recipe()
    config.run_dir = "runs/train_desktop_form_step_credit"
    config.advantage.step_credit = StepCredit(weight=1.0, gamma=0.95)
    return config


def small() -> TrainJob.Config:
    """Every stage at CI size: 8 demonstrations, 2 warm-start steps, 2 RL steps of 2 groups of 4."""
    return ci_size(recipe(), "runs/train_desktop_form_small", demonstrations=8, group_size=4)
