"""The training-vs-rollout logprob mismatch of every RL step, per turn, and a warning naming it.

``gap_t = |logp_train(t) - logp_rollout(t)|`` on every loss token ``t``: the trainer's logprob of
the sampled token against the one the engine recorded. On policy and with the same weights it is
float noise; a large gap on the tokens of one turn says the trainer did not see what the engine
saw (a dropped, reordered or misaligned image, a prompt rendered differently, logprobs of another
distribution). A lag of ``max_staleness`` policy versions adds the policy's own change.

Each RL step reports, over the step's loss tokens (``train/`` metrics):

- ``logprob_mismatch``: the mean gap; ``logprob_mismatch_max``: the largest one;
- ``logprob_mismatch_turn_max``: the largest mean gap of one turn (a run of loss tokens);
- ``logprob_mismatch_image_turns``: the mean gap over the tokens of turns whose prompt showed an
  image since the previous turn, and ``logprob_mismatch_image_turn_max`` the largest such turn mean.

A turn whose mean gap exceeds ``PolicyLoss.Config.mismatch_warn`` is logged as a warning naming
the sequence's key, the turn and the images its prompt showed (content hashes). A turn split over
CP or TP ranks is judged on each rank's share of it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vlrl.records import SeqMeta

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TurnGap:
    """One turn's share of loss tokens on this rank and their gap to the rollout's logprobs."""

    key: str
    turn: int
    images: tuple[str, ...]
    """Content hashes of the images the turn's prompt showed since the previous turn."""
    tokens: int
    gap_sum: float
    gap_max: float

    @property
    def mean(self) -> float:
        return self.gap_sum / self.tokens


def turn_gaps(
    gap: np.ndarray,
    segment_ids: np.ndarray,
    turn_ids: np.ndarray,
    turn_first_image: np.ndarray,
    turn_images: np.ndarray,
    keys: Sequence[str],
    metas: Mapping[str, SeqMeta],
) -> list[TurnGap]:
    """Group the loss positions' gaps (``(S,)`` each; ``turn_ids`` -1 off the mask) by sequence and
    turn; ``segment_ids`` index ``keys``."""
    on = turn_ids >= 0
    out = []
    for seg, turn in sorted(set(zip(segment_ids[on].tolist(), turn_ids[on].tolist()))):
        rows = on & (segment_ids == seg) & (turn_ids == turn)
        meta = metas[keys[seg]]
        first, count = int(turn_first_image[rows][0]), int(turn_images[rows][0])
        out.append(TurnGap(
            keys[seg], turn, _image_hashes(meta, first, count), int(rows.sum()),
            float(gap[rows].sum()), float(gap[rows].max()),
        ))  # fmt: skip
    return out


def mismatch_sums(gap: np.ndarray, turns: Sequence[TurnGap]) -> dict[str, float]:
    """A micro-batch's mismatch sums and maxima, named for the trainer's reduction (``*_max``: a
    max over ranks; the others summed, then divided in ``mismatch_metrics``)."""
    image_turns = [t for t in turns if t.images]
    return {
        "logprob_mismatch_sum": float(gap.sum()),
        "logprob_mismatch_max": float(gap.max(initial=0.0)),
        "logprob_mismatch_turn_max": max((t.mean for t in turns), default=0.0),
        "image_turn_mismatch_sum": sum(t.gap_sum for t in image_turns),
        "image_turn_tokens": float(sum(t.tokens for t in image_turns)),
        "logprob_mismatch_image_turn_max": max((t.mean for t in image_turns), default=0.0),
    }


def mismatch_metrics(reduced: dict[str, float]) -> None:
    """Turn the step's reduced sums into means, in place (``tokens``: the step's loss tokens)."""
    reduced["logprob_mismatch"] = reduced.pop("logprob_mismatch_sum") / max(reduced.get("tokens", 0.0), 1.0)
    image_tokens = reduced.pop("image_turn_tokens")
    reduced["logprob_mismatch_image_turns"] = reduced.pop("image_turn_mismatch_sum") / max(image_tokens, 1.0)


def warn_mismatched(turns: Sequence[TurnGap], threshold: float | None, where: str) -> None:
    """Log each turn whose mean gap exceeds ``threshold``, naming sequence, turn and images."""
    if threshold is None:
        return
    for t in turns:
        if t.mean > threshold:
            shown = ", ".join(h[:12] for h in t.images) or "none"
            log.warning(
                "%s: the trainer's logprobs of sequence %s, turn %d, differ from the rollout's by %.4g"
                " on average over %d tokens (max %.4g; warning above %g); images its prompt showed: %s."
                " Likely cause: the trainer did not see what the engine saw (an image dropped, reordered"
                " or misaligned, a prompt rendered differently) or logprobs of another distribution",
                where, t.key, t.turn, t.mean, t.tokens, t.gap_max, threshold, shown,
            )


def _image_hashes(meta: SeqMeta, first: int, count: int) -> tuple[str, ...]:
    """Content hashes of image runs ``first .. first + count - 1`` of ``meta``, in token order."""
    ordered = [index for _, index in sorted(meta.image_offsets)]
    return tuple(meta.images[i].content_hash for i in ordered[first : first + count] if i < len(meta.images))
