"""Screenshots from an env host to its loop host as the tiles the loop lacks (``mm.tile_wire``).

An env host with ``screen_tile_px`` set keeps a ``TileSender`` per harness lease and returns each
observation as a ``ShippedObservation``; the tenant's ``EnvSession`` assembles it with its own
``TileReceiver``. A GUI step changes a few tiles of the screen, so a step's observation costs a
few kilobytes where a whole 1080p screenshot is 6 MB. A session that cannot assemble one (its
receiver dropped tiles) asks the host to ``resend`` the screen whole.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from vlrl.harness import Observation
from vlrl.mm import content_hash
from vlrl.mm.tile_wire import TiledImage, TileReceiver, TileSender

RECEIVER_MB = 64
"""Tiles a session keeps (MiB): a 1080p screen is 6 MiB of them, so this holds an episode's
screens and their changes."""


@dataclass(frozen=True, slots=True)
class ShippedObservation:
    """An observation whose screenshot travels as tiles."""

    screen: TiledImage
    rest: dict[str, Any]
    """Every other field of the observation, as it was."""

    @classmethod
    def of(cls, obs: Observation, sender: TileSender) -> ShippedObservation:
        screen = sender.encode(content_hash(obs.screenshot), obs.screenshot)
        return cls(screen, {f.name: getattr(obs, f.name) for f in fields(obs) if f.name != "screenshot"})

    def observation(self, receiver: TileReceiver) -> Observation | None:
        """The observation, or None when ``receiver`` lacks some of its tiles."""
        pixels = receiver.assemble(self.screen)
        if pixels is None:
            return None
        return Observation(screenshot=pixels, **self.rest)


def new_receiver() -> TileReceiver:
    return TileReceiver(RECEIVER_MB * 2**20)
