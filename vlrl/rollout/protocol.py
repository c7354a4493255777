"""The token-in/token-out contract between an inference client and an engine replica.

The client owns tokenization: it sends the full context as token ids (image placeholders already
expanded to each image's token count) and gets back the exact token ids the policy sampled with
their logprobs, so generated text is never re-tokenized. Images travel as a *delta*: an
``ImagePart`` carries pixels only the first time a replica sees that content hash in a
trajectory, and a bare reference afterwards; a replica that lost an image answers ``CacheMiss``
and the client resends. To a replica that takes them, a new image travels as the tiles the replica
lacks (``tiles``, ``mm.tile_wire``) instead of its pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from vlrl.mm import require_canonical
from vlrl.mm.tile_wire import TiledImage


@dataclass(frozen=True, slots=True)
class ImagePart:
    """One image of the context, in order of appearance."""

    content_hash: str
    width: int
    height: int
    pixels: np.ndarray | None = None
    """Canonical RGB pixels, or None when the replica already holds this hash (or ``tiles`` are sent)."""
    tiles: TiledImage | None = None
    """The image as the tiles the replica lacks, against an image it holds (replicas that take tiles)."""

    def __post_init__(self) -> None:
        if self.tiles is not None:
            if self.pixels is not None:
                raise ValueError(f"image {self.content_hash}: send pixels or tiles, not both")
            if (self.tiles.key, self.tiles.height, self.tiles.width) != (self.content_hash, self.height, self.width):
                raise ValueError(
                    f"image {self.content_hash} ({self.width}x{self.height}): its tiles are of image"
                    f" {self.tiles.key} ({self.tiles.width}x{self.tiles.height})"
                )
        if self.pixels is not None:
            require_canonical(self.pixels)
            if self.pixels.shape[:2] != (self.height, self.width):
                raise ValueError(
                    f"image {self.content_hash}: pixels {self.pixels.shape[1]}x{self.pixels.shape[0]} "
                    f"but declared {self.width}x{self.height}"
                )

    @property
    def carried(self) -> bool:
        """Whether the part brings its image (pixels or tiles), rather than naming one held."""
        return self.pixels is not None or self.tiles is not None

    @property
    def nbytes(self) -> int:
        if self.tiles is not None:
            return self.tiles.nbytes
        return 0 if self.pixels is None else int(self.pixels.nbytes)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 64
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"sampling temperature={self.temperature}; expected a finite number >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"sampling top_p={self.top_p}; expected 0 < top_p <= 1")
        if self.max_tokens < 1:
            raise ValueError(f"sampling max_tokens={self.max_tokens}; expected >= 1")


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    request_id: str
    trajectory_id: str
    prompt_ids: np.ndarray
    """int32 token ids of the whole context so far."""
    images: tuple[ImagePart, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    fork_of: str = ""
    """The trajectory this one branched from (a branching rollout's root; '' for none): a replica
    that holds no KV prefix of this trajectory yet starts from that one's, where they agree."""

    @property
    def image_bytes(self) -> int:
        return sum(part.nbytes for part in self.images)


@dataclass(frozen=True, slots=True)
class GenerateResult:
    request_id: str
    token_ids: np.ndarray
    """int32 ids the policy sampled."""
    logprobs: np.ndarray
    """float32 log-probability of each sampled id under the sampling policy version."""
    finish_reason: Literal["stop", "length"]
    policy_version: int
    prefill_tokens: int
    """Prompt tokens this request computed."""
    reused_prefix_tokens: int
    """Prompt tokens served from the trajectory's cached KV prefix."""
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    """Optional per-token fields the engine reports (e.g. MoE routed experts, the top-p nucleus
    size): one row per sampled token; they pass through to the store unchanged."""
    prompt_extras: dict[str, np.ndarray] = field(default_factory=dict)
    """Fields of the same kind for the prompt tokens this request computed (its last
    ``prefill_tokens``; MoE routed experts), one row each; stored over the same tokens'
    earlier rows, if any."""

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        if len(self.logprobs) != n:
            raise ValueError(f"result {self.request_id}: {n} token ids but {len(self.logprobs)} logprobs")
        for rows, each, extras in ((n, "sampled", self.extras), (self.prefill_tokens, "prefilled prompt", self.prompt_extras)):
            for name, values in extras.items():
                if len(values) != rows:
                    raise ValueError(
                        f"result {self.request_id}: extra field {name!r} has {len(values)} rows; expected {rows}, one a {each} token"
                    )


@dataclass(frozen=True, slots=True)
class ScoreResult:
    """Per-token logprobs of a given sequence under the replica's weights (a teacher's scores)."""

    request_id: str
    logprobs: np.ndarray
    """float32 ``log p(ids[t] | ids[:t])`` for every position t >= 1; position 0 is 0."""
    policy_version: int


@dataclass(frozen=True, slots=True)
class CacheMiss:
    """The replica no longer holds these images (eviction, restart); resend their pixels."""

    request_id: str
    missing: tuple[str, ...]
