"""``SeqMeta``: the small record of one stored sequence, all the driver ever sees of it.

The payload (token ids, logprobs, loss mask, and fields written later such as advantages) lives
in the store under ``key``; images live once per content hash under their own keys and appear
here only as ``MMItemMeta``. No arrays: the driver's memory grows with the number of sequences,
not with their length or their pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from vlrl.mm import MMItemMeta

PAYLOAD_FIELDS = ("token_ids", "logprobs", "loss_mask")
"""Fields every sequence payload has: int32 ids, float32 sampling logprobs (0 on prompt tokens),
bool loss mask (True on tokens the policy generated)."""

EXTRA_PREFIX = "extra/"
"""Prefix of optional per-token fields an engine reported (MoE routing, top-p indices)."""

Finish = Literal["done", "max_turns", "truncated", "error"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqMeta:
    key: str
    group_id: str
    source: str
    sample_index: int
    reward: float
    success: bool
    finish: Finish
    turns: int
    num_tokens: int
    num_response_tokens: int
    context_lengths: tuple[int, ...]
    """Context length (tokens) at each request to the policy, in order."""
    policy_version: int
    """Oldest policy version that sampled any of its tokens."""
    images: tuple[MMItemMeta, ...] = ()
    """Unique images of the sequence."""
    image_offsets: tuple[tuple[int, int], ...] = ()
    """(token offset of the image's first placeholder, index into ``images``) per occurrence."""
    extra_fields: tuple[str, ...] = ()
    """Names of the optional per-token payload fields (``extra/...``) this sequence has."""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"SeqMeta.key={self.key!r}; expected a non-empty store key")
        if not math.isfinite(self.reward):
            raise ValueError(f"SeqMeta.reward={self.reward}; expected a finite number")
        if not 0 <= self.num_response_tokens <= self.num_tokens:
            raise ValueError(
                f"SeqMeta.num_response_tokens={self.num_response_tokens}; expected 0..num_tokens={self.num_tokens}"
            )
        if any(not 0 < n <= self.num_tokens for n in self.context_lengths):
            raise ValueError(f"SeqMeta.context_lengths={self.context_lengths}; expected values in 1..{self.num_tokens}")
        for offset, index in self.image_offsets:
            if not (0 <= offset < self.num_tokens and 0 <= index < len(self.images)):
                raise ValueError(
                    f"SeqMeta.image_offsets has ({offset}, {index}); expected offset < {self.num_tokens} "
                    f"and index < {len(self.images)}"
                )
