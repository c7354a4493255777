"""The optimizer of a training stage: AdamW, and its learning rate per step.

The schedule is one of two, spelled the same for the RL stage (``optim.schedule``) and the warm
start (``warm_start.schedule``):

- ``constant``: ``lr`` at every step;
- ``cosine``: from ``lr`` at step 0 down to ``min_lr_ratio * lr`` at the stage's last step along
  half a cosine, ``lr_t = lr * (r + (1 - r) * (1 + cos(pi * t / T)) / 2)`` with ``r =
  min_lr_ratio`` and ``T`` the stage's steps. A high rate learns fast but leaves the loss at its
  noise floor; decaying it lets a fixed budget of steps settle.

The stage's steps ``T`` are not a setting of their own: they are the stage's ``steps``
(``TrainJob.Config.steps``, ``WarmStart.steps``), passed to the trainer when it is built.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from vlrl.config import Ge, Gt, Le
from vlrl.train.lr_schedule import lr_at

if TYPE_CHECKING:
    import torch

Schedule = Literal["constant", "cosine"]


class Optimizer:
    """AdamW with decoupled weight decay, global gradient clipping and a learning-rate schedule."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """The optimizer and its learning-rate schedule (``--set optim.lr=1e-4``)."""

        lr: Annotated[float, Gt(0)] = 1e-5
        """AdamW learning rate (the peak of the schedule)."""

        schedule: Schedule = "constant"
        """``constant``: ``lr`` throughout; ``cosine``: from ``lr`` down to ``min_lr_ratio * lr``
        over the stage's steps (``steps`` of the run, or ``warm_start.steps``)."""

        min_lr_ratio: Annotated[float, Ge(0), Le(1)] = 0.1
        """The share of ``lr`` a cosine schedule ends at."""

        weight_decay: Annotated[float, Ge(0)] = 0.0
        """AdamW decoupled weight decay."""

        betas: tuple[float, float] = (0.9, 0.999)
        """AdamW moment decay rates."""

        max_grad_norm: Annotated[float, Gt(0)] = 1.0
        """Gradients are scaled down to this global L2 norm when above it."""

        def lr_at(self, step: int, steps: int) -> float:
            """The rate of optimizer step ``step`` (0-based) of a stage of ``steps`` steps."""
            decay_steps = steps if self.schedule == "cosine" else 0
            return lr_at(step, self.lr, decay_steps=decay_steps, min_ratio=self.min_lr_ratio)

        def build(self, param_groups: Iterable[dict[str, Any]]) -> torch.optim.AdamW:
            """AdamW over ``param_groups`` at ``lr`` (the trainer sets each step's rate from ``lr_at``)."""
            import torch

            return torch.optim.AdamW(list(param_groups), lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)
