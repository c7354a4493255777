"""The training-vs-rollout logprob mismatch of every RL step, split by lag, per turn, and a warning
naming the sequences, turns and images it flags.

``gap_t = |logp_train(t) - logp_rollout(t)|`` on every loss token ``t``: the trainer's logprob of
the sampled token against the one the engine recorded. The token's **lag** is the number of policy
versions between the weights that sampled it and the weights the trainer holds:

- **lag 0**: the same weights. The gap is the engine's kernels against the trainer's, float noise
  (below 1e-6 with the embedded engine on CPU in float32; larger in bfloat16), so a turn above the
  engine's noise says the trainer did not see what the engine saw: a dropped, reordered or
  misaligned image, a prompt rendered differently, logprobs of another distribution.
- **lag >= 1** (rollouts ahead of training, ``driver.prefetch_batches``): the gap adds the policy's
  own change over the lag, which one RL step at the main job's rate makes 0.1-2 nats on single
  tokens; the same threshold would flag every step, so these turns have their own
  (``PolicyLoss.Config.mismatch_warn``), and a misalignment shows among them only when it is large.

Each RL step reports, over the step's loss tokens (``train/`` metrics):

- ``logprob_mismatch``: the mean gap; ``logprob_mismatch_max``: the largest one;
- ``logprob_mismatch_turn_max``: the largest mean gap of one turn (a run of loss tokens);
- ``logprob_mismatch_image_turns``: the mean gap over the tokens of turns whose prompt showed an
  image since the previous turn, and ``logprob_mismatch_image_turn_max`` the largest such turn mean;
- ``logprob_mismatch_lag0`` / ``logprob_mismatch_lagged``: the mean gap of lag-0 / lag >= 1 tokens,
  ``logprob_mismatch_lag0_turn_max`` / ``logprob_mismatch_lagged_turn_max`` the largest turn mean
  of each, ``lag0_tokens`` / ``lagged_tokens`` how many tokens each mean is over;
- ``mismatch_warned_sequences``: sequences warned about (a sequence split over CP or TP ranks is
  judged, and may be counted, on each rank's share of it).

A sequence with a turn whose mean gap exceeds its lag's threshold is logged as one warning naming
the sequence's key and, per flagged turn, its lag, its gap and the images its prompt showed since
the previous turn (content hashes): the images to look at first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vlrl.records import SeqMeta

log = logging.getLogger(__name__)

LAG0_FLOOR = 1e-3
"""The lowest lag-0 threshold (mean nats a turn): a thousand times the embedded engine's gap on
CPU in float32 (below 1e-6), and under the smallest gap a misaligned screenshot made on the tiny
model (0.14 nats a turn; issue 56)."""

LAG0_NOISE_FACTOR = 4.0
"""The lag-0 threshold is this many times the engine's measured per-turn noise (``lag0_threshold``)."""

ENGINE_NOISE = {"float32": 1e-6, "float16": 0.0063, "bfloat16": 0.058}
"""The largest per-turn mean gap measured between an engine computing in each dtype and the
float32 trainer on aligned inputs: float32 from the main job's lag-0 turns (embedded engine; vLLM's
CPU build 9.5e-7, ``docs/vllm.md``); float16 and bfloat16 from the warm-started tiny Qwen2-VL of
the main job cast to that dtype on CPU, 16 sequences (median 0.0035 / 0.023; single tokens up to
0.021 / 0.26). Larger models and GPU kernels may differ: set ``loss.mismatch_warn_lag0`` then."""


def engine_noise(dtype: str) -> float:
    """``ENGINE_NOISE`` of an engine's ``dtype``; 'auto' (the checkpoint's) counts as bfloat16, the largest."""
    return ENGINE_NOISE.get(dtype, ENGINE_NOISE["bfloat16"])


def lag0_threshold(noise: float) -> float:
    """The lag-0 warning threshold for an engine whose per-turn mean gap against the trainer on
    aligned inputs is at most ``noise`` (``engine_noise``): ``LAG0_NOISE_FACTOR`` times it, at
    least ``LAG0_FLOOR``. bfloat16: 0.23, so a misaligned image is seen in float32 (1e-3) but only
    when it moves a turn by more than that in bfloat16."""
    return max(LAG0_FLOOR, LAG0_NOISE_FACTOR * noise)


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
    lag: int | None = None
    """Policy versions between the weights that sampled the turn and the trainer's (its tokens'
    largest); None when the step was not told the trainer's version: judged as lagged."""

    @property
    def mean(self) -> float:
        return self.gap_sum / self.tokens

    @property
    def same_policy(self) -> bool:
        """Sampled by the weights the trainer holds: the gap is the engine's against the trainer's."""
        return self.lag == 0


def turn_gaps(
    gap: np.ndarray,
    segment_ids: np.ndarray,
    turn_ids: np.ndarray,
    turn_first_image: np.ndarray,
    turn_images: np.ndarray,
    keys: Sequence[str],
    metas: Mapping[str, SeqMeta],
    lags: np.ndarray | None = None,
) -> list[TurnGap]:
    """Group the loss positions' gaps (``(S,)`` each; ``turn_ids`` -1 off the mask) by sequence and
    turn; ``segment_ids`` index ``keys``; ``lags`` (``(S,)``) each position's lag, if known."""
    on = turn_ids >= 0
    out = []
    for seg, turn in sorted(set(zip(segment_ids[on].tolist(), turn_ids[on].tolist()))):
        rows = on & (segment_ids == seg) & (turn_ids == turn)
        meta = metas[keys[seg]]
        first, count = int(turn_first_image[rows][0]), int(turn_images[rows][0])
        out.append(TurnGap(
            keys[seg], turn, _image_hashes(meta, first, count), int(rows.sum()),
            float(gap[rows].sum()), float(gap[rows].max()),
            None if lags is None else int(lags[rows].max()),
        ))  # fmt: skip
    return out


def mismatch_sums(gap: np.ndarray, turns: Sequence[TurnGap]) -> dict[str, float]:
    """A micro-batch's mismatch sums and maxima, named for the trainer's reduction (``*_max``: a
    max over ranks; the others summed, then divided in ``mismatch_metrics``)."""
    image_turns = [t for t in turns if t.images]
    lag0 = [t for t in turns if t.same_policy]
    lagged = [t for t in turns if not t.same_policy]
    return {
        "logprob_mismatch_sum": float(gap.sum()),
        "logprob_mismatch_max": float(gap.max(initial=0.0)),
        "logprob_mismatch_turn_max": max((t.mean for t in turns), default=0.0),
        "image_turn_mismatch_sum": sum(t.gap_sum for t in image_turns),
        "image_turn_tokens": float(sum(t.tokens for t in image_turns)),
        "logprob_mismatch_image_turn_max": max((t.mean for t in image_turns), default=0.0),
        "lag0_mismatch_sum": sum(t.gap_sum for t in lag0),
        "lag0_tokens": float(sum(t.tokens for t in lag0)),
        "logprob_mismatch_lag0_turn_max": max((t.mean for t in lag0), default=0.0),
        "lagged_mismatch_sum": sum(t.gap_sum for t in lagged),
        "lagged_tokens": float(sum(t.tokens for t in lagged)),
        "logprob_mismatch_lagged_turn_max": max((t.mean for t in lagged), default=0.0),
    }


def mismatch_metrics(reduced: dict[str, float]) -> None:
    """Turn the step's reduced sums into means, in place (``tokens``: the step's loss tokens)."""
    reduced["logprob_mismatch"] = reduced.pop("logprob_mismatch_sum") / max(reduced.get("tokens", 0.0), 1.0)
    image_tokens = reduced.pop("image_turn_tokens")
    reduced["logprob_mismatch_image_turns"] = reduced.pop("image_turn_mismatch_sum") / max(image_tokens, 1.0)
    for lag in ("lag0", "lagged"):
        reduced[f"logprob_mismatch_{lag}"] = reduced.pop(f"{lag}_mismatch_sum") / max(reduced[f"{lag}_tokens"], 1.0)


def warn_mismatched(turns: Sequence[TurnGap], lag0: float | None, lagged: float | None, where: str) -> int:
    """Log one warning per sequence with a turn whose mean gap exceeds its lag's threshold (``lag0``
    for turns sampled by the trainer's weights, ``lagged`` for older ones; None: never), naming
    each such turn and its images; returns how many sequences were warned about."""
    flagged: dict[str, list[tuple[TurnGap, float]]] = {}
    for t in turns:
        threshold = lag0 if t.same_policy else lagged
        if threshold is not None and t.mean > threshold:
            flagged.setdefault(t.key, []).append((t, threshold))
    for key, bad in flagged.items():
        seen = sum(1 for t in turns if t.key == key)
        named = "; ".join(
            f"turn {t.turn} (lag {'?' if t.lag is None else t.lag}): {t.mean:.4g} on average over {t.tokens} tokens"
            f" (max {t.gap_max:.4g}; warning above {threshold:g}), images {', '.join(h[:12] for h in t.images) or 'none'}"
            for t, threshold in bad
        )
        cause = (
            "the trainer did not see what the engine saw (an image dropped, reordered or misaligned, a prompt"
            " rendered differently) or logprobs of another distribution"
        )
        if any(not t.same_policy for t, _ in bad):
            cause += "; at lag >= 1 also the policy's own change since (loss.mismatch_warn bounds it)"
        log.warning(
            "%s: the trainer's logprobs of sequence %s differ from the rollout's on %d of its %d turns here: %s."
            " Likely cause: %s",
            where, key, len(bad), seen, named, cause,
        )  # fmt: skip
    return len(flagged)


def _image_hashes(meta: SeqMeta, first: int, count: int) -> tuple[str, ...]:
    """Content hashes of image runs ``first .. first + count - 1`` of ``meta``, in token order."""
    ordered = [index for _, index in sorted(meta.image_offsets)]
    return tuple(meta.images[i].content_hash for i in ordered[first : first + count] if i < len(meta.images))
