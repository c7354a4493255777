"""Pixel rectangles: every widget owns one, and actions hit-test against them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rect:
    """``w`` x ``h`` pixels whose top-left pixel is (``x``, ``y``)."""

    x: int
    y: int
    w: int
    h: int

    @property
    def right(self) -> int:
        return self.x + self.w

    @property
    def bottom(self) -> int:
        return self.y + self.h

    @property
    def center(self) -> tuple[int, int]:
        return self.x + self.w // 2, self.y + self.h // 2

    @property
    def corners(self) -> tuple[int, int, int, int]:
        """Inclusive corners, the form ``ImageDraw`` expects."""
        return self.x, self.y, self.right - 1, self.bottom - 1

    def contains(self, px: int, py: int) -> bool:
        return self.x <= px < self.right and self.y <= py < self.bottom

    def inset(self, d: int) -> Rect:
        return Rect(self.x + d, self.y + d, max(1, self.w - 2 * d), max(1, self.h - 2 * d))
