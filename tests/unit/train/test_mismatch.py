"""The logprob-mismatch guard: loss positions are grouped into reply turns with the images their
prompts showed, counted in the packed micro-batch; a turn whose trainer logprobs drift from the
rollout's is named with its sequence, turn and images."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from tests.helpers.records import seq_meta
from vlrl.records import HASH_HEX_CHARS, MMItemMeta
from vlrl.train.mismatch import mismatch_metrics, mismatch_sums, turn_gaps, warn_mismatched
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
        warn_mismatched(turns, 1.0, "micro-batch 0 of DP rank 0 (rank 0)")
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "sequence seq/a, turn 1," in warning and "by 2.5 on average over 1 tokens" in warning
    assert f"images its prompt showed: {'2' * 12}, {'3' * 12}." in warning
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
        warn_mismatched(turns, 1.0, "here")
        warn_mismatched([t for t in turns], None, "here")
    assert caplog.records == []
