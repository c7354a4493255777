"""New images that came as tiles (``ImagePart.tiles``), assembled at the replica's door against
the tiles and grids it holds, so everything after sees whole pixels. A part it cannot assemble
(its base or a tile was dropped) becomes a bare reference, which the image cache then answers as
any other: held, or a ``CacheMiss`` that makes the client send the image again whole."""

from __future__ import annotations

from dataclasses import replace

from vlrl.mm.tile_wire import TileReceiver
from vlrl.rollout.protocol import GenerateRequest, ImagePart


def untiled(request: GenerateRequest, receiver: TileReceiver) -> GenerateRequest:
    """``request`` with each tiled image assembled into pixels (or left a reference)."""
    if all(part.tiles is None for part in request.images):
        return request
    parts = []
    for part in request.images:
        if part.tiles is not None:
            part = ImagePart(part.content_hash, part.width, part.height, receiver.assemble(part.tiles))
        parts.append(part)
    return replace(request, images=tuple(parts))
