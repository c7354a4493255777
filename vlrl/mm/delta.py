"""Which images an inference endpoint already holds, per trajectory.

A GUI agent's context grows by one screenshot per turn, so resending every image on every
request costs O(turns^2) bytes. The tracker lets a client ship pixels only for content hashes
the endpoint has not received in this trajectory, and references for the rest; when the
endpoint reports a miss (eviction, restart) the hash is forgotten and shipped again.
"""

from __future__ import annotations

from collections.abc import Iterable


class DeltaTracker:
    def __init__(self) -> None:
        self._held: set[str] = set()

    def needs_pixels(self, content_hash: str) -> bool:
        return content_hash not in self._held

    def shipped(self, hashes: Iterable[str]) -> None:
        """The endpoint accepted a request carrying (or referencing) these hashes."""
        self._held.update(hashes)

    def lost(self, hashes: Iterable[str]) -> None:
        """The endpoint reported these hashes missing: ship them again."""
        self._held.difference_update(hashes)

    def reset(self) -> None:
        """A new endpoint (replica switch or restart) holds nothing of this trajectory."""
        self._held.clear()

    def held(self) -> frozenset[str]:
        """The hashes the endpoint holds of this trajectory (a branch starts from its root's)."""
        return frozenset(self._held)

    def __len__(self) -> int:
        return len(self._held)
