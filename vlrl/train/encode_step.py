"""``StepEncoder``: one rank's share of a step's image encoding, end to end.

Per step, on every rank alike::

    StepImages (metadata) --plan_encoders--> EncodePlan --Routing.build--> one routing per micro-batch
    this rank's items --fetch_pixels (background thread: fetch + preprocess chunk k+1)--> encode chunk k
    encoder rows E (this rank's images, each distinct image once in the whole step)

then per micro-batch ``embeddings(i)`` sends rows of ``E`` to the ranks holding their tokens with one
``all_to_all_single``. The encoder runs once per step, not once per micro-batch: the rows are cut
from the encoder's graph as a leaf ``E'``; each micro-batch's backward runs the reverse all-to-all and
accumulates into ``E'.grad`` (a repeated image's rows gather the sum over all its occurrences, in
every micro-batch); ``backward()`` then pushes ``E'.grad`` through the encoder once. That is exact:
``d loss / d theta = (d E / d theta)^T (sum over micro-batches of d loss_i / d E)``.

Each rank's encoder gradients cover only the images it encoded, so the caller sums encoder
gradients over all ranks (every rank holds the encoder), not only over its DP group.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.distributed as dist

from encoders.protocol import EncoderError, EncoderInput, VisionEncoder
from vlrl.pack.layout import Layout
from vlrl.records import MMItemMeta
from vlrl.train.encode_plan import EncodePlan, plan_encoders
from vlrl.train.pixel_fetch import fetch_pixels
from vlrl.train.redistribute import Routing, redistribute_rows
from vlrl.train.step_images import StepImages


@dataclass(slots=True)
class EncodeStats:
    """What one rank's encoding of a step cost."""

    images: int = 0
    """Distinct images this rank encoded."""
    rows: int = 0
    """Embedding rows it produced."""
    pixel_bytes: int = 0
    """Pixel bytes it fetched from the store: those of its own images only."""
    fetch_wait_s: float = 0.0
    """Time the encoder waited for pixels (fetch and preprocess not hidden behind compute)."""
    encode_s: float = 0.0
    """Encoder forward time."""
    redistribute_s: float = 0.0
    """Forward all-to-all time over the step's micro-batches."""
    sent_rows: int = 0
    """Rows sent to other ranks (rows kept on this rank cross no network)."""


class EncodedStep:
    """A step's encoder output on one rank; hand out micro-batch embeddings, then ``backward()``."""

    def __init__(
        self, plan: EncodePlan, routings: Sequence[Routing], rows: torch.Tensor, rank: int, stats: EncodeStats
    ) -> None:
        self.plan = plan
        self.routings = tuple(routings)
        self.stats = stats
        self._rank = rank
        self._rows = rows  # (encoded rows, hidden), in the encoder's graph when training
        self._leaf = rows.detach().requires_grad_(rows.requires_grad)

    def embeddings(self, micro_batch: int) -> torch.Tensor:
        """This rank's image-token embeddings of micro-batch ``micro_batch``, ``(rows, hidden)`` in
        window order. Collective. When training, the result must be part of every rank's loss graph
        (splicing it into the input embeddings is, even with zero rows): its backward is collective."""
        if not 0 <= micro_batch < len(self.routings):
            raise IndexError(f"micro_batch={micro_batch}; the step has {len(self.routings)} micro-batches")
        routing = self.routings[micro_batch]
        start = time.perf_counter()
        out = redistribute_rows(self._leaf, routing)
        self.stats.redistribute_s += time.perf_counter() - start
        self.stats.sent_rows += int(routing.counts[self._rank].sum() - routing.counts[self._rank, self._rank])
        return out

    def backward(self) -> None:
        """Push the gradients gathered over the step's micro-batches through the encoder, once.
        Local: the all-to-alls already ran in each micro-batch's backward."""
        if self._rows.requires_grad and self._leaf.grad is not None:
            self._rows.backward(self._leaf.grad)
        self._leaf.grad = None


class StepEncoder:
    """Encodes each step's images on this rank; see the module docstring."""

    def __init__(self, encoder: VisionEncoder, store, layout: Layout, rank: int, *, chunk_tokens: int = 16384) -> None:
        if chunk_tokens < 1:
            raise ValueError(f"chunk_tokens={chunk_tokens}; expected >= 1 rows per encoder forward")
        self.encoder = encoder
        self.layout = layout
        self.rank = rank
        self._store = store
        self._chunk_tokens = chunk_tokens
        self._prep = ThreadPoolExecutor(1, thread_name_prefix=f"encode-prep-{rank}")

    def plan(self, images: StepImages) -> tuple[EncodePlan, list[Routing]]:
        """The step's encoder plan (metadata only) and each micro-batch's routing; same on every rank."""
        if images.layout != self.layout:
            raise ValueError(
                f"rank {self.rank}: step images were placed for {images.layout}, the encoder runs on {self.layout}"
            )
        plan = plan_encoders(
            images.items, self.layout.world_size, cost=self.encoder.cost, owners=images.owners()
        )
        return plan, [Routing.build(plan, mb.pieces) for mb in images.micro_batches]

    def encode(self, images: StepImages) -> EncodedStep:
        """Plan, fetch this rank's pixels and encode them; collective only through ``embeddings``."""
        world = dist.get_world_size() if dist.is_initialized() else 1
        if world != self.layout.world_size:
            raise ValueError(f"rank {self.rank}: the layout {self.layout} has {self.layout.world_size} ranks, the world {world}")
        plan, routings = self.plan(images)
        metas = {item.content_hash: item for item in images.items}
        stats = EncodeStats()
        chunks = _chunks(plan, self.rank, self._chunk_tokens)
        outputs = []
        pending = self._prepare(plan, chunks[0], metas) if chunks else None
        for k in range(len(chunks)):
            start = time.perf_counter()
            inputs, nbytes = pending.result()
            stats.fetch_wait_s += time.perf_counter() - start
            pending = self._prepare(plan, chunks[k + 1], metas) if k + 1 < len(chunks) else None
            start = time.perf_counter()
            outputs.append(self._forward(inputs, [metas[plan.hashes[i]] for i in chunks[k]]))
            stats.encode_s += time.perf_counter() - start
            stats.images += len(inputs)
            stats.pixel_bytes += nbytes
        rows = torch.cat(outputs) if outputs else self._no_rows()
        stats.rows = rows.shape[0]
        return EncodedStep(plan, routings, rows, self.rank, stats)

    def close(self) -> None:
        self._prep.shutdown(wait=True)

    def _prepare(self, plan: EncodePlan, chunk: list[int], metas) -> Future[tuple[list[EncoderInput], int]]:
        """Fetch and preprocess one chunk on the background thread, while the encoder computes."""
        hashes = [plan.hashes[i] for i in chunk]
        return self._prep.submit(self._fetch_and_preprocess, hashes, [plan.num_tokens[i] for i in chunk], metas)

    def _fetch_and_preprocess(self, hashes: list[str], rows: list[int], metas) -> tuple[list[EncoderInput], int]:
        pixels = fetch_pixels(self._store, hashes, rank=self.rank)
        inputs = []
        for content_hash, expected, array in zip(hashes, rows, pixels, strict=True):
            array = np.asarray(array)  # store reads may be read-only views; processors want to own them
            prepared = self.encoder.preprocess(array if array.flags.writeable else array.copy())
            if prepared.num_tokens != expected:
                raise EncoderError(
                    self.encoder.name,
                    f"rank {self.rank}: preprocess gives {prepared.num_tokens} rows, the metadata says {expected}",
                    item=metas[content_hash],
                )
            inputs.append(prepared)
        return inputs, int(sum(np.asarray(p).nbytes for p in pixels))

    def _forward(self, inputs: list[EncoderInput], items: list[MMItemMeta]) -> torch.Tensor:
        batch = self.encoder.collate(inputs)
        device = self._device()
        batch = replace(batch, pixel_values=batch.pixel_values.to(device), grid_thw=batch.grid_thw.to(device))
        out = self.encoder(batch)
        expected = sum(batch.num_tokens)
        width = self.encoder.row_width  # hidden_size * feature_levels
        if out.ndim != 2 or out.shape[0] != expected or out.shape[1] != width:
            raise EncoderError(
                self.encoder.name,
                f"rank {self.rank}: forward gave {tuple(out.shape)} for images"
                f" {[m.content_hash[:12] for m in items]}; expected ({expected}, {width}):"
                f" hidden_size {self.encoder.hidden_size} x feature_levels {self.encoder.feature_levels}",
                item=items[0],
            )
        return out

    def _no_rows(self) -> torch.Tensor:
        """The output on no images, in the encoder's dtype and, when training, in a graph."""
        param = next(self.encoder.parameters(), None)
        dtype = param.dtype if param is not None else torch.float32
        trainable = torch.is_grad_enabled() and any(p.requires_grad for p in self.encoder.parameters())
        return torch.zeros(0, self.encoder.row_width, dtype=dtype, device=self._device(), requires_grad=trainable)

    def _device(self) -> torch.device:
        param = next(self.encoder.parameters(), None)
        return param.device if param is not None else torch.device("cpu")


def _chunks(plan: EncodePlan, rank: int, chunk_tokens: int) -> list[list[int]]:
    """This rank's items in plan order, cut into forwards of at most ``chunk_tokens`` rows (an
    image larger than that is a forward of its own)."""
    chunks: list[list[int]] = []
    rows = chunk_tokens
    for i in plan.items_of(rank):
        if rows + plan.num_tokens[i] > chunk_tokens:
            chunks.append([])
            rows = 0
        chunks[-1].append(i)
        rows += plan.num_tokens[i]
    return chunks
