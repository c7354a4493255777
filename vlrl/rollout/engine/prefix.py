"""Per-trajectory KV prefixes: an Agent Loop's next turn repeats its whole previous context.

After each request the engine keeps the trajectory's keys and values for ``prompt + generated``
(all but the last sampled token, which was never fed back). A new request reuses the longest
prefix its ``prompt_ids`` share with that sequence, so only the new observation is prefilled.

Tokens alone do not identify an image (every image is a run of the same ``<|image_pad|>`` id),
so an image run counts as shared only if its content hash and span match too, and the reused
prefix never ends inside an image: the vision tower embeds an image whole.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class ImageSpan:
    """Where one image's ``<|image_pad|>`` run lies in a token sequence."""

    start: int
    stop: int
    content_hash: str


@dataclass(frozen=True, slots=True)
class KVPrefix:
    """A trajectory's cached sequence and its keys and values, one (heads, len, head_dim) pair per layer;
    for a linear-attention layer the pair is its conv window and recurrent state after the whole sequence."""

    tokens: np.ndarray
    images: tuple[ImageSpan, ...]
    kv: tuple[tuple[torch.Tensor, torch.Tensor], ...]

    def shared_length(self, prompt: np.ndarray, images: tuple[ImageSpan, ...]) -> int:
        """Tokens of ``prompt`` (with its ``images``) this prefix can stand for.

        At most ``len(prompt) - 1``: the last prompt token is always computed, since its logits
        give the first sampled token.
        """
        limit = min(len(self.tokens), len(prompt) - 1)
        differs = np.flatnonzero(self.tokens[:limit] != prompt[:limit])
        shared = int(differs[0]) if len(differs) else limit
        for mine, theirs in zip(self.images, images):
            if mine.start >= shared:
                break
            if mine != theirs:
                return mine.start
        for span in images:
            if span.start < shared < span.stop:
                return span.start
        return shared


class PrefixCache:
    """``KVPrefix`` per trajectory, least recently used dropped beyond ``capacity`` (0: keep none)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, KVPrefix] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, trajectory_id: str) -> KVPrefix | None:
        prefix = self._entries.get(trajectory_id)
        if prefix is not None:
            self._entries.move_to_end(trajectory_id)
        return prefix

    def put(self, trajectory_id: str, prefix: KVPrefix) -> None:
        self._entries[trajectory_id] = prefix
        self._entries.move_to_end(trajectory_id)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)

    def drop(self, trajectory_id: str) -> None:
        self._entries.pop(trajectory_id, None)

    def clear(self) -> None:
        self._entries.clear()
