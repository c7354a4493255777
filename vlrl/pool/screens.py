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

INLINE_PIXELS = 640 * 480
"""A screen of at most this many pixels is assembled on the loop host's event loop: handing it
to a thread and back costs about as much CPU as assembling it (320x240: 0.2 ms to assemble; the
handoff 0.08 more in a quiet process, 0.2-0.3 on a loaded 2-core machine). A larger one goes to
a thread (1080p: about 1 ms, which would hold every other tenant of the host)."""

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

    @property
    def inline(self) -> bool:
        """Cheaper to assemble on the event loop than through a thread (``INLINE_PIXELS``)."""
        return self.screen.height * self.screen.width <= INLINE_PIXELS

    def observation(self, receiver: TileReceiver) -> Observation | None:
        """The observation, or None when ``receiver`` lacks some of its tiles."""
        pixels = receiver.assemble(self.screen)
        if pixels is None:
            return None
        return Observation(screenshot=pixels, **self.rest)


def new_receiver() -> TileReceiver:
    return TileReceiver(RECEIVER_MB * 2**20)
