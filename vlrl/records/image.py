"""``MMItemMeta``: the control-plane record of one image, small enough to ship anywhere.

The driver, the micro-batch planner and the encoder planner schedule on this record alone; the
pixels stay in the payload store under ``store_key``, field ``fields.PIXELS``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Protocol

HASH_HEX_CHARS = 32
"""Length of a content hash (``mm.content_hash``): 128 bits as lowercase hex."""

_IMAGE_KEY_PREFIX = "img/"
_HASH_PATTERN = re.compile(f"[0-9a-f]{{{HASH_HEX_CHARS}}}")


class TokenRule(Protocol):
    """What an encoder's patch rule (``mm.PatchRule``) tells from an image's size alone."""

    def grid(self, width: int, height: int) -> tuple[int, int, int]: ...

    def num_tokens(self, width: int, height: int) -> int: ...


def image_store_key(content_hash: str) -> str:
    """Return the store key of an image's pixels: content-addressed, so each is stored once."""
    _check_hash("content_hash", content_hash)
    return _IMAGE_KEY_PREFIX + content_hash


@dataclass(frozen=True, slots=True, kw_only=True)
class MMItemMeta:
    """Identity, size and (once an encoder rule is applied) token cost of one image."""

    content_hash: str
    """32 lowercase hex chars of the canonical pixels (``mm.content_hash``)."""
    width: int
    """Width of the canonical pixels."""
    height: int
    """Height of the canonical pixels."""
    nbytes: int
    """Raw canonical RGB bytes, ``width * height * 3``: what fetching the pixels costs."""
    store_key: str
    """Where the pixels live in the payload store (``image_store_key``)."""
    grid_thw: tuple[int, int, int] | None = None
    """The encoder's patch grid ``(t, h, w)``; None until a rule is applied."""
    num_tokens: int | None = None
    """LLM tokens the image becomes; None exactly when ``grid_thw`` is."""

    def __post_init__(self) -> None:
        _check_hash("MMItemMeta.content_hash", self.content_hash)
        for name in ("width", "height", "nbytes"):
            value = getattr(self, name)
            if not _is_positive_int(value):
                raise ValueError(f"MMItemMeta.{name}: {value!r}; expected an int >= 1")
        if self.nbytes != self.width * self.height * 3:
            raise ValueError(
                f"MMItemMeta.nbytes: {self.nbytes}; expected width * height * 3 ="
                f" {self.width * self.height * 3}"
            )
        if not isinstance(self.store_key, str) or not self.store_key:
            raise ValueError(f"MMItemMeta.store_key: {self.store_key!r}; expected a non-empty str")
        if (self.grid_thw is None) != (self.num_tokens is None):
            raise ValueError(
                f"MMItemMeta.grid_thw: {self.grid_thw!r}, num_tokens: {self.num_tokens!r};"
                " expected both or neither"
            )
        if self.grid_thw is None:
            return
        grid = self.grid_thw
        if not (isinstance(grid, tuple) and len(grid) == 3 and all(map(_is_positive_int, grid))):
            raise ValueError(f"MMItemMeta.grid_thw: {grid!r}; expected (t, h, w), ints >= 1")
        if not _is_positive_int(self.num_tokens):
            raise ValueError(f"MMItemMeta.num_tokens: {self.num_tokens!r}; expected an int >= 1")

    def with_patch_rule(self, rule: TokenRule) -> MMItemMeta:
        """Return a copy with the grid and token count ``rule`` gives this image's size."""
        return dataclasses.replace(
            self,
            grid_thw=rule.grid(self.width, self.height),
            num_tokens=rule.num_tokens(self.width, self.height),
        )


def _check_hash(field: str, value: object) -> None:
    if not isinstance(value, str) or not _HASH_PATTERN.fullmatch(value):
        raise ValueError(f"{field}: {value!r}; expected {HASH_HEX_CHARS} lowercase hex chars")


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
