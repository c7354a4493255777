"""The encode benchmark's schemes on one rank of the wall-time world (``encode_wall``).

Each scheme returns this rank's embedding rows of every micro-batch, in buffer (window) order:

- ``planner``: ``StepEncoder`` (plan, fetch own pixels, encode, one all-to-all per micro-batch);
- ``token_owner``: encode every image this rank holds rows of, once; nothing moves;
- ``gathered(assign, sp=True)``: each DP replica's distinct images, in first-seen order, assigned
  over its CP x TP ranks by ``assign``; each rank fetches and encodes its own, pads its rows to the
  largest rank's count (gloo gathers equal sizes only; verl and vLLM pad too) and all-gathers them
  among the replica's ranks. The fair baseline: the frameworks gather among the ranks sharing a
  micro-batch, and fetching only one's own pixels is the cheapest they could do;
- ``gathered(assign, sp=False)``: the world-wide variant, as the issue first worded it: the whole
  step over the whole world, every rank reading every image's pixels (fetch-all);
- ``reference``: the rows a rank must hold, from one forward per image it holds rows of, outside
  any scheme's batching or communication: what ``outputs_match`` compares every scheme against.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from vlrl.pack import Layout
from vlrl.train.encode_step import StepEncoder
from vlrl.train.pixel_fetch import fetch_pixels
from vlrl.train.step_images import StepImages

Assign = Callable[[np.ndarray, int], np.ndarray]
"""``(costs, ranks) -> rank of each image``: a baseline's assignment."""


class Schemes:
    """The schemes on rank ``rank``; ``groups[dp]`` is DP replica ``dp``'s process group."""

    def __init__(self, layout: Layout, rank: int, store, encoder, images: StepImages, groups: list) -> None:
        self.layout, self.rank, self.encoder, self.images, self.store = layout, rank, encoder, images, store
        self.step_encoder = StepEncoder(encoder, store, layout, rank)
        self.items = {item.content_hash: item for item in images.items}  # distinct, first-seen order
        self.hashes = list(self.items)
        self.costs = np.array([encoder.cost(self.items[h]) for h in self.hashes])
        dp = layout.coords(rank).dp
        self._replica = [r for r in range(layout.world_size) if layout.coords(r).dp == dp]  # CP x TP ranks
        self._group = groups[dp]
        on_replica = {p.content_hash for mb in images.micro_batches for p in mb.pieces if p.dest_rank in self._replica}
        self._replica_hashes = [h for h in self.hashes if h in on_replica]

    def planner(self) -> list[torch.Tensor]:
        encoded = self.step_encoder.encode(self.images)
        return [encoded.embeddings(i) for i in range(len(self.images.micro_batches))]

    def token_owner(self) -> list[torch.Tensor]:
        return self._select(*self._encode(self.held()))

    def gathered(self, assign: Assign, *, sp: bool) -> list[torch.Tensor]:
        if sp:
            hashes, ranks_in, group = self._replica_hashes, self._replica, self._group
        else:
            hashes, ranks_in, group = self.hashes, list(range(self.layout.world_size)), None
        size, me = len(ranks_in), ranks_in.index(self.rank)
        ranks = assign(np.array([self.encoder.cost(self.items[h]) for h in hashes]), size)
        mine = [h for h, r in zip(hashes, ranks, strict=True) if r == me]
        pixels = None if sp else dict(zip(hashes, fetch_pixels(self.store, hashes, rank=self.rank), strict=True))
        local, _ = self._encode(mine, pixels)
        rows = [self.items[h].num_tokens for h in hashes]
        counts = np.bincount(ranks, weights=rows, minlength=size).astype(np.int64)
        if size > 1:
            padded = local.new_zeros(int(counts.max()), local.shape[1])  # (largest rank's rows, H)
            padded[: local.shape[0]] = local
            parts = [torch.empty_like(padded) for _ in range(size)]
            dist.all_gather(parts, padded, group=group)
            local = torch.cat([part[:n] for part, n in zip(parts, counts.tolist(), strict=True)])
        order = sorted(range(len(hashes)), key=lambda i: (ranks[i], i))  # rank by rank, each in order
        starts = np.cumsum([0] + [rows[i] for i in order])[:-1].tolist()
        return self._select(local, {hashes[i]: start for i, start in zip(order, starts, strict=True)})

    def reference(self) -> list[torch.Tensor]:
        held = self.held()
        pixels = fetch_pixels(self.store, held, rank=self.rank)
        outputs = [self.encoder(self.encoder.collate([self._preprocess(p)])) for p in pixels]
        starts = np.cumsum([0] + [out.shape[0] for out in outputs])[:-1].tolist()
        rows = torch.cat(outputs) if outputs else torch.zeros(0, self.encoder.hidden_size)
        return self._select(rows, dict(zip(held, starts, strict=True)))

    def held(self) -> list[str]:
        """Distinct images this rank holds rows of, in first-seen order."""
        mbs = self.images.micro_batches
        return list(dict.fromkeys(p.content_hash for mb in mbs for p in mb.pieces if p.dest_rank == self.rank))

    def close(self) -> None:
        self.step_encoder.close()

    def _preprocess(self, pixels: np.ndarray):
        array = np.asarray(pixels)  # store reads may be read-only views; processors want to own them
        return self.encoder.preprocess(array if array.flags.writeable else array.copy())

    def _encode(self, mine: list[str], pixels: dict[str, np.ndarray] | None = None):
        """Rows of the images ``mine`` in order in one forward (fetching their pixels unless
        given), and the row where each image starts."""
        starts = dict(zip(mine, np.cumsum([0] + [self.items[h].num_tokens for h in mine])[:-1].tolist()))
        if not mine:
            return torch.zeros(0, self.encoder.hidden_size), starts
        if pixels is None:
            pixels = dict(zip(mine, fetch_pixels(self.store, mine, rank=self.rank), strict=True))
        return self.encoder(self.encoder.collate([self._preprocess(pixels[h]) for h in mine])), starts

    def _select(self, rows: torch.Tensor, starts: dict[str, int]) -> list[torch.Tensor]:
        """This rank's rows of each micro-batch out of ``rows``, where image ``h`` starts at ``starts[h]``."""
        out = []
        for mb in self.images.micro_batches:
            mine = sorted((p for p in mb.pieces if p.dest_rank == self.rank), key=lambda p: p.dest_offset)
            index = [np.arange(p.num_rows) + starts[p.content_hash] + p.row_start for p in mine]
            out.append(rows.index_select(0, torch.as_tensor(np.concatenate(index) if index else np.zeros(0, np.int64))))
        return out
