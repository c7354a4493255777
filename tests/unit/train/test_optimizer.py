"""The optimizer's learning-rate schedule: constant, or a cosine over the stage's steps."""

from __future__ import annotations

import math

import pytest

from vlrl.train.optimizer import Optimizer


def test_a_constant_schedule_keeps_the_rate():
    optim = Optimizer.Config(lr=1e-3)
    assert [optim.lr_at(step, 10) for step in (0, 5, 10, 50)] == [1e-3] * 4


@pytest.mark.parametrize("steps", [1, 4, 250])
def test_a_cosine_falls_from_lr_to_its_floor_over_the_stage(steps):
    optim = Optimizer.Config(lr=1e-2, schedule="cosine", min_lr_ratio=0.1)
    assert optim.lr_at(0, steps) == pytest.approx(1e-2)
    assert optim.lr_at(steps, steps) == pytest.approx(1e-3)
    assert optim.lr_at(steps + 7, steps) == pytest.approx(1e-3)  # flat after the stage
    half = 1e-2 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    if steps % 2 == 0:
        assert optim.lr_at(steps // 2, steps) == pytest.approx(half)


def test_build_gives_adamw_with_the_configured_moments():
    import torch

    param = torch.nn.Parameter(torch.zeros(2))
    adamw = Optimizer.Config(lr=3e-4, betas=(0.8, 0.9), weight_decay=0.01).build([{"params": [param]}])
    group = adamw.param_groups[0]
    assert isinstance(adamw, torch.optim.AdamW)
    assert (group["lr"], group["betas"], group["weight_decay"]) == (3e-4, (0.8, 0.9), 0.01)
