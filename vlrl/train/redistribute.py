"""``redistribute``: encoder outputs to the ranks holding their image tokens, in one all-to-all.

Each rank encodes the distinct images the ``EncodePlan`` gives it; its output rows are those
items' embeddings concatenated in plan order (``Routing.local_items``). A *piece* is a run of an
image's rows that one destination rank holds, at rows ``[dest_offset, dest_offset + num_rows)``
of its image-token buffer (its image tokens in window order). An image cut by a CP chunk or TP
shard border is several pieces; a repeated image, or a shard every TP rank holds (no sequence
parallelism), sends the same source rows to several pieces.

``Routing`` turns plan and pieces into index arrays, identically on every rank:

* ``counts[s, d]``: rows rank ``s`` sends rank ``d``, the split sizes of ``all_to_all_single``;
* ``send_index[s]``: local rows of ``s`` to gather, grouped by destination, in piece order;
* ``recv_index[d]``: where each received row goes in ``d``'s buffer (received rows arrive
  grouped by source, in the order the source sent them).

Forward is ``out[recv_index] = all_to_all(x[send_index])``. Its adjoint is the reverse
all-to-all of ``grad_out[recv_index]``, then ``grad_x.index_add_(send_index, ...)``: a row sent
to k pieces receives the sum of their k gradients, so encoder gradients are exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from vlrl.pack.layout import Layout
from vlrl.train.encode_plan import EncodePlan


class Piece(NamedTuple):
    """Rows ``[row_start, row_start + num_rows)`` of image ``content_hash`` land at rows
    ``[dest_offset, dest_offset + num_rows)`` of ``dest_rank``'s image-token buffer."""

    content_hash: str
    row_start: int
    num_rows: int
    dest_rank: int
    dest_offset: int


@dataclass(frozen=True, slots=True)
class Routing:
    """Who sends which encoder rows where; the same object on every rank."""

    local_items: tuple[tuple[tuple[str, int], ...], ...]
    """Per rank, the ``(content_hash, num_tokens)`` it encodes, in output row order."""
    counts: np.ndarray
    """``(world, world)`` rows sent from rank ``s`` (row) to rank ``d`` (column)."""
    send_index: tuple[np.ndarray, ...]
    """Per rank, local encoder rows to send, grouped by destination rank."""
    recv_index: tuple[np.ndarray, ...]
    """Per rank, the buffer row of each received row (grouped by source rank)."""

    @property
    def world_size(self) -> int:
        return len(self.local_items)

    def encoded_rows(self, rank: int) -> int:
        """Rows ``rank``'s encoder produces."""
        return sum(n for _, n in self.local_items[rank])

    def received_rows(self, rank: int) -> int:
        """Image-token rows ``rank`` holds after redistribution."""
        return len(self.recv_index[rank])

    @classmethod
    def build(cls, plan: EncodePlan, pieces: Sequence[Piece]) -> Routing:
        """The routing of ``pieces`` when ``plan`` says who encodes each image; every destination's
        pieces must tile its buffer ``[0, n)`` exactly once."""
        world = plan.world_size
        index = {h: i for i, h in enumerate(plan.hashes)}
        local_offset = np.zeros(len(plan.hashes), dtype=np.int64)  # first output row on its encoder
        local_items = []
        for rank in range(world):
            items = plan.items_of(rank)
            rows = np.array([plan.num_tokens[i] for i in items], dtype=np.int64)
            local_offset[items] = np.cumsum(rows) - rows
            local_items.append(tuple((plan.hashes[i], plan.num_tokens[i]) for i in items))
        src, src_row, dest, dest_row, length = [], [], [], [], []
        for piece in pieces:
            item = index.get(piece.content_hash)
            if item is None:
                raise ValueError(f"piece {piece}: image {piece.content_hash} is not in the encode plan")
            if not 0 <= piece.dest_rank < world:
                raise ValueError(f"piece {piece}: dest_rank out of range 0..{world - 1}")
            if piece.num_rows < 1 or piece.row_start < 0 or piece.dest_offset < 0:
                raise ValueError(f"piece {piece}: expected num_rows >= 1, row_start >= 0, dest_offset >= 0")
            if piece.row_start + piece.num_rows > plan.num_tokens[item]:
                raise ValueError(
                    f"piece {piece}: rows up to {piece.row_start + piece.num_rows} of image"
                    f" {piece.content_hash}, which has {plan.num_tokens[item]} tokens"
                )
            src.append(plan.ranks[item])
            src_row.append(local_offset[item] + piece.row_start)
            dest.append(piece.dest_rank)
            dest_row.append(piece.dest_offset)
            length.append(piece.num_rows)
        src, src_row, dest, dest_row, length = (np.asarray(a, dtype=np.int64) for a in (src, src_row, dest, dest_row, length))
        # Wire order: by (source, destination, destination offset); both sides derive it alike.
        order = np.lexsort((dest_row, dest, src))
        counts = np.zeros((world, world), dtype=np.int64)
        np.add.at(counts, (src, dest), length)
        send_index = tuple(_rows(src_row[order][src[order] == s], length[order][src[order] == s]) for s in range(world))
        recv_index = []
        for d in range(world):
            mine = order[dest[order] == d]  # sources ascending, as all_to_all_single delivers them
            rows = _rows(dest_row[mine], length[mine])
            if not np.array_equal(np.sort(rows), np.arange(len(rows))):
                raise ValueError(f"pieces for rank {d} do not tile its image-token rows 0..{len(rows) - 1} once")
            recv_index.append(rows)
        return cls(tuple(local_items), counts, send_index, tuple(recv_index))


def _rows(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Row indices of the runs ``[start, start + length)``, concatenated: ``(sum(lengths),)``."""
    run_begin = np.cumsum(lengths) - lengths  # where each run starts in the output
    return np.repeat(starts - run_begin, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


def place_images(
    layout: Layout, dp_rank: int, total_len: int, images: Sequence[tuple[str, int, int]]
) -> list[Piece]:
    """The pieces of the images in DP rank ``dp_rank``'s packed micro-batch of ``total_len`` tokens,
    ``images`` being ``(content_hash, position, num_tokens)`` with positions in the packed sequence.
    Each rank of that DP replica gets the image tokens among the positions it holds, in window order."""
    spans = sorted((position, position + n, h) for h, position, n in images)
    pieces = []
    for cp_rank in range(layout.cp):
        window = layout.cp_window(total_len, cp_rank)  # [(start, stop)] in window order
        for tp_rank in range(layout.tp):
            rank = layout.rank(dp_rank, cp_rank, tp_rank)
            offset = 0
            for start, stop in _shard_ranges(layout, window, tp_rank):
                for lo, hi, content_hash in spans:
                    a, b = max(lo, start), min(hi, stop)
                    if a < b:
                        pieces.append(Piece(content_hash, a - lo, b - a, rank, offset))
                        offset += b - a
    return pieces


def _shard_ranges(layout: Layout, window: list[tuple[int, int]], tp_rank: int) -> list[tuple[int, int]]:
    """Packed-position ranges of TP rank ``tp_rank``'s shard of a CP window, in window order."""
    first, last = layout.tp_shard(sum(stop - start for start, stop in window), tp_rank)
    out, seen = [], 0  # seen: window positions before this range
    for start, stop in window:
        a, b = max(first - seen, 0), min(last - seen, stop - start)
        if a < b:
            out.append((start + a, start + b))
        seen += stop - start
    return out


class _AllToAllRows(torch.autograd.Function):
    """``out[recv_index] = all_to_all(x[send_index])``; backward the adjoint (see module docstring)."""

    @staticmethod
    def forward(ctx, local: torch.Tensor, routing: Routing, rank: int, group) -> torch.Tensor:
        send_index = torch.as_tensor(routing.send_index[rank], device=local.device)
        recv_index = torch.as_tensor(routing.recv_index[rank], device=local.device)
        send_counts = routing.counts[rank].tolist()
        recv_counts = routing.counts[:, rank].tolist()
        received = local.new_empty((len(recv_index), local.shape[1]))  # (R, H), grouped by source
        dist.all_to_all_single(
            received, local.index_select(0, send_index), recv_counts, send_counts, group=group
        )
        ctx.save_for_backward(send_index, recv_index)
        ctx.meta = (local.shape[0], send_counts, recv_counts, group)
        return received.new_empty(received.shape).index_copy_(0, recv_index, received)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        send_index, recv_index = ctx.saved_tensors
        num_local, send_counts, recv_counts, group = ctx.meta
        grad_sent = grad_out.new_empty((len(send_index), grad_out.shape[1]))  # (S, H)
        dist.all_to_all_single(
            grad_sent, grad_out.index_select(0, recv_index).contiguous(), send_counts, recv_counts, group=group
        )
        grad_local = grad_out.new_zeros((num_local, grad_out.shape[1]))
        return grad_local.index_add_(0, send_index, grad_sent), None, None, None


def redistribute(outputs: Sequence[torch.Tensor], routing: Routing, *, group=None) -> torch.Tensor:
    """This rank's image-token embeddings ``(received_rows, hidden)`` in window order, from its
    encoder ``outputs``: one ``(num_tokens, hidden)`` tensor per item of ``routing.local_items[rank]``.
    A rank encoding nothing passes its encoder's output on no images, one ``(0, hidden)`` tensor,
    so dtype, device and whether gradients flow agree on every rank: backward is a collective too.
    Collective: every rank of ``group`` calls it with the same ``routing``."""
    rank = dist.get_rank(group)
    items = routing.local_items[rank] or (("<no images>", 0),)
    if len(outputs) != len(items):
        raise ValueError(f"rank {rank}: {len(outputs)} encoder outputs; the routing has {len(items)} items here")
    for (content_hash, num_tokens), out in zip(items, outputs, strict=True):
        if out.ndim != 2 or out.shape[0] != num_tokens or out.shape[1] != outputs[0].shape[1]:
            raise ValueError(
                f"rank {rank}: encoder output for image {content_hash} has shape {tuple(out.shape)};"
                f" expected ({num_tokens}, {outputs[0].shape[-1]}), one row per token"
            )
    return redistribute_rows(torch.cat(list(outputs)) if len(outputs) > 1 else outputs[0], routing, group=group)


def redistribute_rows(local: torch.Tensor, routing: Routing, *, group=None) -> torch.Tensor:
    """``redistribute`` of this rank's encoder rows already concatenated in plan order,
    ``(routing.encoded_rows(rank), hidden)``. Collective, like ``redistribute``."""
    rank = dist.get_rank(group)
    if dist.get_world_size(group) != routing.world_size:
        raise ValueError(
            f"rank {rank}: the routing was built for {routing.world_size} ranks, the process group has"
            f" {dist.get_world_size(group)}; plan with the trainer's layout"
        )
    if local.ndim != 2 or local.shape[0] != routing.encoded_rows(rank):
        raise ValueError(
            f"rank {rank}: {tuple(local.shape)} encoder rows; the routing expects"
            f" ({routing.encoded_rows(rank)}, hidden) for images {[h for h, _ in routing.local_items[rank]][:3]}"
        )
    return _AllToAllRows.apply(local, routing, rank, group)
