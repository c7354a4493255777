"""``vlrl bench scale``'s pure pieces: the saturating stage, the labelled projection, and the
stand-in screens that a group shares by content hash."""

from __future__ import annotations

import math

import pytest

from vlrl.bench.scale_bench import growth, project, saturating_stage
from vlrl.bench.scale_standins import CHANGED_TILES, SCREEN, TILE, image_tokens, screen


def test_the_saturating_stage_is_the_one_whose_cost_per_sequence_grows_most():
    curves = {
        "hook": {1024: 100.0, 4096: 110.0, 16384: 120.0},  # 1.2x
        "launch": {1024: 50.0, 4096: 100.0, 16384: 200.0},  # 4x: superlinear in all
        "release": {1024: 30.0, 4096: 20.0, 16384: 15.0},  # cheaper per sequence at scale
    }
    assert saturating_stage(curves) == ("launch", 4.0)
    assert growth(curves["release"]) == 0.5


def test_a_stage_that_cost_nothing_at_some_size_is_not_named():
    curves = {"grading": {1024: 0.0, 4096: 3.0}, "hook": {1024: 1.0, 4096: 1.5}}
    assert growth(curves["grading"]) == math.inf
    assert saturating_stage(curves) == ("hook", 1.5)


def test_the_projection_extends_the_two_largest_points_as_a_power_law():
    linear_total = {1024: 10.0, 4096: 10.0, 16384: 10.0}  # flat per sequence
    assert project(linear_total, 65536) == pytest.approx(10.0)
    quadratic_total = {1024: 5.0, 4096: 10.0, 16384: 20.0}  # per sequence doubles per 4x
    assert project(quadratic_total, 65536) == pytest.approx(40.0)
    assert project({1024: 7.0}, 65536) == 7.0  # one point: held flat


def test_a_task_seed_gives_one_screen_sequence_each_turn_changing_a_few_tiles():
    first, again, other = screen(3, 0), screen(3, 0), screen(4, 0)
    assert first.content_hash == again.content_hash != other.content_hash
    later = screen(3, 1)
    assert later.pixels.shape == (*SCREEN, 3) and later.content_hash != first.content_hash
    changed = (later.pixels != first.pixels).any(axis=2)
    tiles = {(y // TILE, x // TILE) for y, x in zip(*changed.nonzero())}
    assert 1 <= len(tiles) <= CHANGED_TILES
    assert image_tokens() == 1196  # 1280x720 under Qwen2-VL's rule: (46 x 26) merged patches
