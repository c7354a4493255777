"""``step_images``: every image occurrence of a training step and where its token rows land.

From the micro-batch ``Plan`` and the sequences' ``SeqMeta`` alone (no payload is read), each
micro-batch index gets the image occurrences of all DP ranks' micro-batches at that index and
their ``Piece``s: which rank holds which rows of which image, at which offset of its
image-token buffer (window order, the order ``PackedWindow.images`` lists them). Every rank
computes the same answer, so the encoder plan and the all-to-all routing need no exchange.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vlrl.pack.layout import Layout
from vlrl.pack.plan import Plan
from vlrl.records import MMItemMeta, SeqMeta
from vlrl.train.redistribute import Piece, place_images


@dataclass(frozen=True, slots=True)
class MicroBatchImages:
    """The images of one micro-batch index, over all DP ranks."""

    items: tuple[MMItemMeta, ...]
    """One entry per occurrence (repeats included): what the encoder planner balances."""
    pieces: tuple[Piece, ...]
    """Where each occurrence's rows land, on every rank."""


@dataclass(frozen=True, slots=True)
class StepImages:
    """The images of a whole step: one ``MicroBatchImages`` per micro-batch index."""

    layout: Layout
    micro_batches: tuple[MicroBatchImages, ...]

    @property
    def items(self) -> list[MMItemMeta]:
        """Every occurrence of the step: each distinct image is encoded once for all of them."""
        return [item for mb in self.micro_batches for item in mb.items]

    def owners(self) -> dict[str, set[int]]:
        """Ranks holding tokens of each image: the planner prefers them when that is free."""
        out: dict[str, set[int]] = {}
        for mb in self.micro_batches:
            for piece in mb.pieces:
                out.setdefault(piece.content_hash, set()).add(piece.dest_rank)
        return out


def step_images(plan: Plan, layout: Layout, metas: Mapping[str, SeqMeta]) -> StepImages:
    """The step's images under ``layout``; ``metas`` holds the ``SeqMeta`` of every planned key."""
    if plan.dp != layout.dp:
        raise ValueError(f"the plan has {plan.dp} DP ranks but the layout {layout} has dp={layout.dp}")
    micro_batches = []
    for index in range(plan.num_micro_batches):
        items, pieces = [], []
        for dp_rank in range(plan.dp):
            mb = plan.ranks[dp_rank][index]
            images = []  # (content_hash, packed position, num_tokens)
            for key, offset in zip(mb.keys, mb.offsets, strict=True):
                meta = metas.get(key)
                if meta is None:
                    raise KeyError(f"micro-batch {index} of DP rank {dp_rank} packs {key!r}, which has no SeqMeta")
                for start, image_index in meta.image_offsets:
                    item = meta.images[image_index]
                    if item.num_tokens is None:
                        raise ValueError(
                            f"image {image_index} of {key!r} has no token count; apply the encoder's patch rule"
                        )
                    items.append(item)
                    images.append((item.content_hash, offset + start, item.num_tokens))
            pieces += place_images(layout, dp_rank, mb.num_tokens, images)
        micro_batches.append(MicroBatchImages(tuple(items), tuple(pieces)))
    return StepImages(layout, tuple(micro_batches))
