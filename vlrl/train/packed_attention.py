"""Attention over a packed CP window: segments never see each other, causal in packed order,
keys and values gathered over the CP group.

A CP rank holds chunks ``i`` and ``2*cp - 1 - i`` of the padded micro-batch (``Layout.cp_window``).
Each layer all-gathers the keys and values of every CP rank's window (the Llama-3 scheme: queries
stay local, keys/values are small under GQA), so a query at packed position ``q`` in segment ``s``
attends exactly to the keys ``k`` with ``segment[k] == s`` and ``position[k] <= q`` wherever they
live. The backward of the gather is a reduce-scatter (sum): a key's gradient collects the
contributions of every CP rank's queries. Padding is its own segment (-1), so every query row
has at least itself to attend to and no real token attends to padding.

Without CP each segment is a contiguous run of the window and attention runs per run (causal,
``sum l_i^2`` work). With CP the mask is dense ``(W, cp*W)`` booleans handed to
``scaled_dot_product_attention``: exact, and fine for the window sizes a CPU trains; a GPU
deployment swaps in a varlen kernel over the same (segment, position) description.

The mask also carries what a linear-attention (recurrent) layer needs under CP (``Pieces``):
which gathered tokens to run, segment by segment in sequence order, so that each of this rank's
tokens sees its segment's state (``train.linear_attention``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers import AttentionInterface

from vlrl.pack.packed import PAD_SEGMENT_ID

ATTENTION_NAME = "vlrl_packed"


class _GatherSequence(torch.autograd.Function):
    """All-gather along dim 0 over ``group``; backward reduce-scatters (sums) the gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        world = dist.get_world_size(group)
        out = x.new_empty((world * x.shape[0], *x.shape[1:]))
        dist.all_gather_into_tensor(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        world = dist.get_world_size(ctx.group)
        out = grad.new_empty((grad.shape[0] // world, *grad.shape[1:]))
        dist.reduce_scatter_tensor(out, grad.contiguous(), group=ctx.group)
        return out, None


def gather_sequence(x: torch.Tensor, group, dim: int) -> torch.Tensor:
    """``x`` of every rank of ``group`` concatenated along ``dim``, in rank order, with gradients."""
    moved = x.movedim(dim, 0)
    return _GatherSequence.apply(moved, group).movedim(0, dim)


@dataclass(frozen=True, slots=True)
class Pieces:
    """A recurrent layer's cover of one CP window whose segments are not contiguous runs of it.

    For each segment this window holds, its tokens of every CP window (the gathered ``(cp*W)``
    keys, rank order) in sequence order, from the segment's first token to this window's last one
    of it: run alone from a zero state, such a piece gives each of this window's tokens exactly
    what the whole segment run at once gives it. This window's padding is one piece of its own."""

    index: tuple[torch.Tensor, ...]
    """Per piece: its tokens' indices into the gathered keys, in sequence order."""
    keep: tuple[torch.Tensor, ...]
    """Per piece: the offsets (into the piece) of this window's tokens."""
    order: torch.Tensor
    """``(W,)``: the kept outputs of all pieces, concatenated, indexed by ``order`` are in window order."""

    @classmethod
    def build(cls, key_pos: np.ndarray, key_seg: np.ndarray, start: int, stop: int, device) -> Pieces | None:
        """From every window's positions and segment ids ``(cp*W,)`` (rank order); this window is
        ``[start, stop)`` of them. None when a segment's positions are not consecutive integers
        (no sequence order to run it in)."""
        key_pos, key_seg = np.asarray(key_pos), np.asarray(key_seg)
        window = key_seg[start:stop]
        _, first = np.unique(window, return_index=True)
        index, keep, placed = [], [], []
        for segment in window[np.sort(first)]:  # segments in window order
            if segment == PAD_SEGMENT_ID:  # this window's padding: no state to bring from elsewhere
                tokens = start + np.flatnonzero(window == segment)
                mine = np.ones(len(tokens), bool)
            else:
                tokens = np.flatnonzero(key_seg == segment)
                tokens = tokens[np.argsort(key_pos[tokens], kind="stable")]
                if np.any(np.diff(key_pos[tokens]) != 1):
                    return None
                mine = (tokens >= start) & (tokens < stop)
                last = int(np.flatnonzero(mine)[-1]) + 1
                tokens, mine = tokens[:last], mine[:last]
            index.append(tokens)
            keep.append(np.flatnonzero(mine))
            placed.append(tokens[mine] - start)
        as_tensor = lambda a: torch.as_tensor(np.asarray(a, dtype=np.int64), device=device)  # noqa: E731
        return cls(
            index=tuple(as_tensor(t) for t in index), keep=tuple(as_tensor(k) for k in keep),
            order=as_tensor(np.argsort(np.concatenate(placed))),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class PackedMask:
    """What the attention layers of one micro-batch need; passed as the layers' ``attention_mask``.

    Without CP every segment is one contiguous run of the window, so attention runs per run
    (``runs``: causal, no mask), costing ``sum l_i^2`` instead of ``W^2``. With CP a segment is
    cut across ranks and the dense ``allowed`` mask over the gathered keys is used."""

    allowed: torch.Tensor | None
    """``(W, cp*W)`` bool: query (this CP window) may attend to key (all CP windows, rank order)."""
    cp_group: Any
    runs: tuple[tuple[int, int], ...] = ()
    """Without CP: ``[start, stop)`` of each segment's run in the window (padding is one too)."""
    pieces: Pieces | None = None
    """When ``runs`` is empty: what a recurrent layer runs (segments in sequence order, over
    the CP group's gathered tokens when ``cp_group`` is set)."""

    @classmethod
    def build(
        cls, positions: np.ndarray, segments: np.ndarray, cp_group: Any, device: torch.device | str = "cpu", recurrent: bool = True
    ) -> PackedMask:
        """From this CP rank's window: packed positions (in the micro-batch) and segment ids, ``(W,)``.
        Collective over ``cp_group`` (the keys' positions and segments are gathered). ``recurrent``:
        the model has linear-attention layers, which need ``pieces`` (a host copy of the keys)."""
        if cp_group is None and _runs_are_ordered(positions, segments):
            return cls(None, None, _runs(segments))
        pos = torch.as_tensor(np.asarray(positions, dtype=np.int64), device=device)
        seg = torch.as_tensor(np.asarray(segments, dtype=np.int64), device=device)
        key_pos, key_seg, start = pos, seg, 0
        if cp_group is not None:
            both = torch.stack([pos, seg], dim=1)  # (W, 2)
            gathered = both.new_empty((dist.get_world_size(cp_group) * len(both), 2))
            dist.all_gather_into_tensor(gathered, both, group=cp_group)
            key_pos, key_seg = gathered[:, 0], gathered[:, 1]
            start = dist.get_rank(cp_group) * len(pos)
        allowed = (seg[:, None] == key_seg[None, :]) & (key_pos[None, :] <= pos[:, None])
        pieces = Pieces.build(key_pos.cpu().numpy(), key_seg.cpu().numpy(), start, start + len(pos), device) if recurrent else None
        return cls(allowed, cp_group, pieces=pieces)


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: PackedMask,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """The ``transformers`` attention interface: ``query`` ``(1, heads, W, d)``, ``key``/``value``
    ``(1, kv_heads, W, d)`` of this rank's heads; returns ``(1, W, heads, d)``."""
    if not isinstance(attention_mask, PackedMask):
        raise TypeError(f"{ATTENTION_NAME} attention needs a PackedMask; got {type(attention_mask).__name__}")
    gqa = query.shape[1] != key.shape[1]
    if attention_mask.runs:  # one causal attention per segment: (1, heads, l_i, d) each
        out = torch.cat([
            F.scaled_dot_product_attention(
                query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], dropout_p=dropout, scale=scaling,
                is_causal=True, enable_gqa=gqa,
            )
            for a, b in attention_mask.runs
        ], dim=2)  # fmt: skip
        return out.transpose(1, 2).contiguous(), None
    if attention_mask.cp_group is not None:
        key = gather_sequence(key, attention_mask.cp_group, dim=2)  # (1, kv_heads, cp*W, d)
        value = gather_sequence(value, attention_mask.cp_group, dim=2)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask.allowed, dropout_p=dropout, scale=scaling, enable_gqa=gqa,
    )  # fmt: skip
    return out.transpose(1, 2).contiguous(), None


def _runs(segments: np.ndarray) -> tuple[tuple[int, int], ...]:
    """``[start, stop)`` of each run of equal segment ids."""
    seg = np.asarray(segments)
    cuts = np.flatnonzero(np.diff(seg)) + 1
    bounds = [0, *cuts.tolist(), len(seg)]
    return tuple((a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a)


def _runs_are_ordered(positions: np.ndarray, segments: np.ndarray) -> bool:
    """Each segment id occurs in one run and positions rise by one along it: the per-run causal
    attention then equals the masked one."""
    seg, pos = np.asarray(segments), np.asarray(positions)
    runs = _runs(seg)
    ids = [int(seg[a]) for a, _ in runs]
    return len(set(ids)) == len(ids) and all(np.all(np.diff(pos[a:b]) == 1) for a, b in runs)


AttentionInterface.register(ATTENTION_NAME, packed_attention)
