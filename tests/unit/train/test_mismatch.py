"""The logprob-mismatch guard: loss positions are grouped into reply turns with the images their
prompts showed, counted in the packed micro-batch; a turn whose trainer logprobs drift from the
rollout's is named with its sequence, turn and images."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.helpers.records import seq_meta
from vlrl.records import HASH_HEX_CHARS, MMItemMeta
from vlrl.train.mismatch import (
    LAG0_FLOOR,
    engine_noise,
    lag0_threshold,
    mismatch_metrics,
    mismatch_sums,
    turn_gaps,
    warn_mismatched,
)
from vlrl.train.targets import _turns

# Two packed sequences, then padding. "i": an image token, "p": prompt, "r": a position whose
# target is a loss token (the position before each reply token).
LAYOUT = "p i i p r r p i p i p r p r r" + " " + "p i p r r" + " " + "- -"
SEGMENTS = [0] * 15 + [1] * 5 + [-1] * 2


def _frame():
    marks = LAYOUT.split()
    is_image = np.array([m == "i" for m in marks])
    mask = np.array([m == "r" for m in marks])
    return is_image, np.array(SEGMENTS), mask


def test_turns_count_replies_and_the_images_shown_since_the_previous_turn():
    turn, first, shown = _turns(*_frame())
    on = _frame()[2]
    # sequence 0: turn 0 after image run 0; turn 1 after image runs 1 and 2; turn 2 after none
    assert turn[on].tolist() == [0, 0, 1, 2, 2, 0, 0]
    assert first[on].tolist() == [0, 0, 1, 3, 3, 0, 0]
    assert shown[on].tolist() == [1, 1, 2, 0, 0, 1, 1]
    assert (turn[~on] == -1).all()


def _image(k: int) -> MMItemMeta:
    return MMItemMeta(content_hash=f"{k:x}" * HASH_HEX_CHARS, width=2, height=2, nbytes=12, store_key=f"img/{k}")


def test_a_misaligned_image_s_turn_is_warned_about_by_sequence_turn_and_image(caplog):
    is_image, segments, mask = _frame()
    turn, first, shown = _turns(is_image, segments, mask)
    metas = {
        "seq/a": seq_meta("seq/a", 15, images=(_image(1), _image(2), _image(3)), image_offsets=((1, 0), (7, 1), (9, 2))),
        "seq/b": seq_meta("seq/b", 5, images=(_image(4),), image_offsets=((1, 0),)),
    }
    gap = np.where(mask, 1e-6, 0.0)
    gap[10:12] = np.where(mask[10:12], 2.5, 0.0)  # turn 1 of seq/a: what followed images 2 and 3 drifted
    turns = turn_gaps(gap, segments, turn, first, shown, ["seq/a", "seq/b"], metas)
    with caplog.at_level(logging.WARNING, logger="vlrl.train.mismatch"):
        warned = warn_mismatched(turns, 1.0, 1.0, "micro-batch 0 of DP rank 0 (rank 0)")
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warned == 1
    assert "sequence seq/a differ from the rollout's on 1 of its 3 turns here: turn 1 (lag ?):" in warning
    assert "2.5 on average over 1 tokens" in warning
    assert f"images {'2' * 12}, {'3' * 12}." in warning
    sums = mismatch_sums(gap[mask], turns)
    assert sums["logprob_mismatch_turn_max"] == pytest.approx(2.5)
    assert sums["logprob_mismatch_image_turn_max"] == pytest.approx(2.5)
    reduced = {**sums, "tokens": float(mask.sum())}
    mismatch_metrics(reduced)
    assert reduced["logprob_mismatch"] == pytest.approx((2.5 + 6e-6) / 7)
    assert reduced["logprob_mismatch_image_turns"] == pytest.approx((2.5 + 4e-6) / 5)  # turn 2 showed no image


def test_no_warning_below_the_threshold_or_when_it_is_off(caplog):
    is_image, segments, mask = _frame()
    turns = turn_gaps(np.where(mask, 0.5, 0.0), segments, *_turns(is_image, segments, mask), ["a", "b"],
                      {"a": seq_meta("a", 15), "b": seq_meta("b", 5)})  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="vlrl.train.mismatch"):
        assert warn_mismatched(turns, 1.0, 1.0, "here") == 0
        assert warn_mismatched(turns, None, None, "here") == 0
    assert caplog.records == []


def test_lag_0_turns_are_judged_on_the_engine_s_noise_and_older_ones_on_the_drift_bound(caplog):
    """Issue 56: at lag 0 a misaligned image moves a turn by 0.14-1.36 nats against float noise, at
    lag 1 the policy's own step moves turns as much; one threshold cannot serve both."""
    is_image, segments, mask = _frame()
    turn, first, shown = _turns(is_image, segments, mask)
    metas = {
        "seq/a": seq_meta("seq/a", 15, images=(_image(1), _image(2), _image(3)), image_offsets=((1, 0), (7, 1), (9, 2))),
        "seq/b": seq_meta("seq/b", 5, images=(_image(4),), image_offsets=((1, 0),)),
    }
    gap = np.where(mask, 0.5, 0.0)  # seq/a's turns sampled one version back: drift
    gap[segments == 1] = np.where(mask[segments == 1], 0.14, 0.0)  # seq/b at lag 0: its image misaligned
    lags = np.where(segments == 0, 1, 0)
    turns = turn_gaps(gap, segments, turn, first, shown, ["seq/a", "seq/b"], metas, lags)
    assert [(t.key, t.lag) for t in turns] == [("seq/a", 1), ("seq/a", 1), ("seq/a", 1), ("seq/b", 0)]
    with caplog.at_level(logging.WARNING, logger="vlrl.train.mismatch"):
        warned = warn_mismatched(turns, lag0_threshold(engine_noise("float32")), 1.0, "here")
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warned == 1 and "sequence seq/b" in warning and "turn 0 (lag 0): 0.14" in warning and "4" * 12 in warning
    sums = mismatch_sums(gap[mask], turns)
    assert sums["logprob_mismatch_lag0_turn_max"] == pytest.approx(0.14)
    assert sums["logprob_mismatch_lagged_turn_max"] == pytest.approx(0.5)
    reduced = {**sums, "tokens": float(mask.sum())}
    mismatch_metrics(reduced)
    assert reduced["logprob_mismatch_lag0"] == pytest.approx(0.14) and reduced["lag0_tokens"] == 2
    assert reduced["logprob_mismatch_lagged"] == pytest.approx(0.5) and reduced["lagged_tokens"] == 5
    # under the one bound of before (1.0 at every lag) the misaligned turn passed unseen
    assert warn_mismatched(turns, 1.0, 1.0, "here") == 0


def test_one_warning_a_sequence_names_every_flagged_turn_and_its_images(caplog):
    is_image, segments, mask = _frame()
    turn, first, shown = _turns(is_image, segments, mask)
    metas = {
        "seq/a": seq_meta("seq/a", 15, images=(_image(1), _image(2), _image(3)), image_offsets=((1, 0), (7, 1), (9, 2))),
        "seq/b": seq_meta("seq/b", 5, images=(_image(4),), image_offsets=((1, 0),)),
    }
    gap = np.where(mask, 0.3, 0.0) * (segments == 0)  # every turn of seq/a off, seq/b exact
    turns = turn_gaps(gap, segments, turn, first, shown, ["seq/a", "seq/b"], metas, np.zeros(len(mask), np.int64))
    with caplog.at_level(logging.WARNING, logger="vlrl.train.mismatch"):
        assert warn_mismatched(turns, 1e-3, 1.0, "here") == 1
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "on 3 of its 3 turns" in warning
    for k in (1, 2, 3):
        assert f"{k:x}" * 12 in warning


def test_the_lag_0_threshold_follows_the_engine_s_dtype():
    assert lag0_threshold(engine_noise("float32")) == LAG0_FLOOR  # float noise: the floor
    assert lag0_threshold(engine_noise("bfloat16")) > 0.058 > lag0_threshold(engine_noise("float32"))
    assert engine_noise("auto") == engine_noise("bfloat16")
