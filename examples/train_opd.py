"""On-policy distillation (OPD): a fresh student learns click-target from a trained teacher.

    vlrl train examples/train_click.py                        # first: the teacher (runs/train_click)
    vlrl train examples/train_opd.py                          # then: distil it into a fresh student
    vlrl train examples/train_opd.py --set teacher.model_path=PATH   # any run folder or hf/ checkpoint
    vlrl train examples/train_opd.py:small                    # CI size (teacher: train_click.py:small's run)

The student is the main job's tiny Qwen2-VL with other random weights (seed 1) and the main job's
warm start. In the RL stage it samples its own episodes as usual; the teacher (an engine replica
of the teacher's checkpoint) scores every finished trajectory, screenshots included, and the
per-token advantage is the teacher's logprob minus the student's (``GroupHook`` mode ``opd``):
tokens the teacher would have written become more likely, the others less. No reward enters the
update; held-out success is still measured by the harness.

Measured on 2 cores (teacher: a main-job run at 0.85 held-out success; 200 held-out episodes per
point, standard error ~0.03): this recipe went 0.00 -> 0.705 (warm start) -> 0.755 (step 10) ->
0.72 (step 30) in 8.5 min, where the main job's GRPO went 0.765 -> 0.85. From a weaker student
(60 warm-start steps, 0.14) 30 steps moved neither OPD (0.145 at lr 1e-3 and 2e-3, collapse to
0.00 at 5e-3) nor GRPO (0.17 at 1e-3, 0.145 at 2e-3) beyond noise. With one sampled token per
position the reverse-KL signal mostly pushes down coordinates the teacher rejects rather than
pointing at the right one; distilling over the teacher's top-k logprobs would give it a
direction, and is not built. The stage runs end to end (CI checks every trained group was
scored by the teacher).
"""

from pathlib import Path

from vlrl.config import load_recipe
from vlrl.job.demos import WarmStart
from vlrl.job.distill import Teacher
from vlrl.job.evaluate import Evaluation
from vlrl.job.train_job import TrainJob
from vlrl.rollout.engine import EmbeddedEngine

MAIN_JOB = Path(__file__).with_name("train_click.py")


def recipe() -> TrainJob.Config:
    """Distil the main job's policy (``runs/train_click``) into a student with its own warm start."""
    config = load_recipe(f"{MAIN_JOB}:recipe")
    config.run_dir = "runs/train_opd"
    config.tiny.seed = 1
    config.teacher = Teacher(
        model_path="runs/train_click",
        engine=EmbeddedEngine.Config(cpus=0, max_batch=32, torch_threads=1),
    )
    config.advantage.mode = "opd"
    config.steps = 30
    return config


def small() -> TrainJob.Config:
    """2 OPD steps from ``train_click.py:small``'s run (``runs/train_click_small``)."""
    config = load_recipe(f"{MAIN_JOB}:small")
    config.run_dir = "runs/train_opd_small"
    config.tiny.seed = 1
    config.warm_start = WarmStart(episodes=8, steps=1, sequences_per_step=8, lr=1e-2, point_grid=7)
    config.teacher = Teacher(model_path="runs/train_click_small")
    config.advantage.mode = "opd"
    config.eval = Evaluation(episodes=4, every=0, screenshots=1, chance=False)
    config.checkpoint_every = 0
    return config
