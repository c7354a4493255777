"""The end-to-end lane's one canonical run, built once per test session and read by every test that
needs a finished run (a training run costs about a minute here; each test building its own made the
lane the slowest part of CI).

The run is ``examples/train_click.py:small`` with TIS and a KL penalty, in five legs that each leave
what the next one reads: train (warm start, 2 RL steps, evaluations, checkpoints), resume to 3 steps,
resume the finished run, branch a new LoRA run from the (full-weight) warm-start checkpoint with
``start_from``, and ``vlrl eval`` of the finished folder. What a later leg overwrites (metrics,
episode sheets, the checkpoint folder) is recorded right after the leg that wrote it.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from vlrl.cli import main
from vlrl.config import load_recipe
from vlrl.job.metrics_log import read_metrics
from vlrl.job.run_folder import read_checkpoint_state

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "train_click.py"
CORRECTIONS = ("loss.kl_coef=0.05", "loss.tis_cap=2.0")
"""TIS (the recipe's default since issue 56; set here as well) and a KL penalty to the warm-start weights, set as a user would."""
PLOTS = ("reward", "pass_rate", "episode_length", "entropy", "throughput", "overview", "episodes")


@dataclass(frozen=True)
class Leg:
    """One ``TrainJob.run()`` of the canonical run and the folder's metrics right after it."""

    summary: dict
    """What ``run()`` returned."""
    printed: dict
    """The JSON line the job printed last on stdout."""
    records: list[dict]
    """``metrics.jsonl`` of the leg's run folder once the leg ended."""


@dataclass(frozen=True)
class FinishedRun:
    """The canonical run's legs and what each left in its folder."""

    run_dir: Path
    first: Leg
    """``small`` with the corrections: warm start, 2 RL steps, checkpoint every step."""
    plot_bytes: dict[str, int]
    """Size of each plot the first leg drew."""
    episode_sheets: list[str]
    """Names of the first leg's annotated episode images (``episodes/*.png``)."""
    tensorboard_files: list[str]
    """The first leg's TensorBoard event files."""
    checkpoints: list[str]
    """``checkpoints/`` after the first leg."""
    state: dict
    """``checkpoints/step-000002/state.json`` after the first leg."""
    resumed: Leg
    """``resume=true`` with ``steps=3``."""
    again: Leg
    """``resume=true`` of the finished 3-step run."""
    warm_start_state: dict
    """The warm-start checkpoint's state before the branch started from it."""
    branch_dir: Path
    branched: Leg
    """A new run, ``start_from`` the warm-start checkpoint, 1 RL step with step credit on LoRA
    adapters (``lora.rank=8``): the engines, built from the tiny model, must serve the warm start."""
    warm_start_state_after_branch: dict
    evaluated: dict
    """``vlrl eval`` of the finished folder: 3 episodes, chance measured, 1 screenshot."""


def _leg(run_dir: Path, *overrides: str) -> Leg:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        summary = load_recipe(f"{RECIPE}:small", [f"run_dir={run_dir}", *overrides]).build().run()
    printed = json.loads(out.getvalue().strip().splitlines()[-1])
    return Leg(summary, printed, read_metrics(run_dir))


@pytest.fixture(scope="session")
def finished_run(ray_session, tmp_path_factory) -> FinishedRun:
    root = tmp_path_factory.mktemp("canonical")
    run_dir, branch_dir = root / "run", root / "branch"
    checkpoints, warm_start = run_dir / "checkpoints", run_dir / "checkpoints" / "warm-start"

    first = _leg(run_dir, *CORRECTIONS)
    plot_bytes = {name: (run_dir / "plots" / f"{name}.png").stat().st_size for name in PLOTS}
    episode_sheets = sorted(p.name for p in (run_dir / "episodes").glob("*.png"))
    tensorboard_files = sorted(p.name for p in (run_dir / "tb").glob("events.out.tfevents.*"))
    listing = sorted(p.name for p in checkpoints.iterdir())
    state = json.loads((checkpoints / "step-000002" / "state.json").read_text())

    resumed = _leg(run_dir, "steps=3", "resume=true", *CORRECTIONS)
    again = _leg(run_dir, "steps=3", "resume=true", *CORRECTIONS)

    warm_start_state = read_checkpoint_state(warm_start)
    branched = _leg(branch_dir, "steps=1", f"start_from={warm_start}", "advantage.step_credit=StepCredit", "lora.rank=8")

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["eval", str(run_dir), "--episodes", "3", "--screenshots", "1"]) == 0
    evaluated = json.loads(out.getvalue().strip().splitlines()[-1])

    return FinishedRun(
        run_dir=run_dir,
        first=first,
        plot_bytes=plot_bytes,
        episode_sheets=episode_sheets,
        tensorboard_files=tensorboard_files,
        checkpoints=listing,
        state=state,
        resumed=resumed,
        again=again,
        warm_start_state=warm_start_state,
        branch_dir=branch_dir,
        branched=branched,
        warm_start_state_after_branch=read_checkpoint_state(warm_start),
        evaluated=evaluated,
    )
