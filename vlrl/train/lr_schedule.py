"""The learning rate per optimizer step: constant, or a cosine from the base rate down to a share
of it. A high rate learns fast but leaves the loss at its noise floor; decaying it lets a fixed
budget of steps settle (``optim.schedule``, ``warm_start.schedule``: ``train.optimizer``)."""

from __future__ import annotations

import math


def lr_at(step: int, lr: float, *, decay_steps: int, min_ratio: float) -> float:
    """The rate of optimizer step ``step`` (0-based): ``lr`` when ``decay_steps`` is 0, else a cosine
    from ``lr`` to ``min_ratio * lr`` over ``decay_steps`` steps, then flat."""
    if not decay_steps:
        return lr
    progress = min(1.0, step / decay_steps)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
