"""Linear-attention layers (Qwen3.5's gated DeltaNet) over a packed window, under CP and TP: the
causal conv1d and the recurrent state restart at every segment border and run in sequence order
across CP ranks, and TP ranks split the layer's heads, so a packed row on any layout gives each
sequence what it gets alone.

A DeltaNet layer mixes tokens only through a short causal convolution and a recurrent state
carried from token to token; run over a packed row as is, both would carry one sequence into the
next. ``packed_forward`` replaces the block's forward (its parameters and their names stay) with
transformers' own steps and functions (the module's ``causal_conv1d_fn``,
``torch_chunk_gated_delta_rule``, its gated norm), run piece by piece from a zero state:

* **Packing.** Without CP each segment of the window (``PackedMask.runs``, padding included) is
  one piece: exact, and what a varlen kernel (flash-linear-attention's ``cu_seqlens``) computes
  in one call on a GPU.
* **CP.** A CP rank holds chunks ``i`` and ``2cp-1-i`` of the packed micro-batch, so a segment's
  earlier tokens (and the state they leave) may live on any other rank. The layer all-gathers its
  conv inputs and gates (``qkv``, ``b``, ``a``: this rank's heads) over the CP group, as full
  attention gathers keys and values, and runs each segment this window holds from its first token
  to the window's last token of it (``PackedMask.pieces``), keeping this window's outputs. The
  state and conv window a token sees are thus recomputed from the segment's start rather than
  passed from rank to rank: exact, no point-to-point chain, and the backward is autograd's (the
  gather's backward reduce-scatters the inputs' gradients to their owners, so the gradient of
  the state reaches earlier chunks through the recomputation). Cost: the recurrence and the conv
  run over up to the whole segment on every rank that holds part of it (a segment filling the
  micro-batch: every CP rank runs up to all of it, rank 0 all of it, since it holds the last
  chunk), so CP divides the projections, norm and output projection of these layers but not
  their recurrence; the gather moves ``cp*W`` rows of ``(2*key_dim + value_dim + 2*v_heads)/tp``
  values a layer, and the backward as many.
* **TP.** ``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a`` are column-parallel and
  ``out_proj`` row-parallel (``train.tensor_parallel``); ``dt_bias`` and ``A_log`` are split by value head, the
  depthwise ``conv1d`` by channel, the gated norm's weight (one head's width) replicated. A rank's
  heads are ``k`` heads ``[r*k/tp, (r+1)*k/tp)`` and the value heads they serve: but
  ``in_proj_qkv`` (and the conv, which shares its channels) stores ``[q | k | v]`` whole, so a
  contiguous 1/tp of its rows is not one rank's heads. Each rank projects its contiguous 1/tp of
  the channels, the TP group all-gathers them (and the conv weight's rows) and each keeps its own
  heads' ``q``, ``k`` and ``v``: one gather of ``W x (2*key_dim + value_dim)`` values a layer (an
  all-to-all would move 1/tp of it), its backward a reduce-scatter.
"""

from __future__ import annotations

import sys
from types import MethodType
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Shard

from vlrl.train.packed_attention import PackedMask, gather_sequence


def linear_attention_layers(language_model: nn.Module) -> list[nn.Module]:
    """The decoder layers' linear-attention blocks (``layer.linear_attn``), in layer order."""
    return [layer.linear_attn for layer in language_model.layers if getattr(layer, "linear_attn", None) is not None]


def reset_at_segment_borders(language_model: nn.Module) -> int:
    """Make every linear-attention block of ``language_model`` run ``packed_forward`` on a
    ``PackedMask`` (in place: the blocks and their parameter names stay); returns how many."""
    blocks = linear_attention_layers(language_model)
    for block in blocks:
        if block.conv1d.bias is not None:
            raise ValueError("a linear-attention block with a conv1d bias; vlrl's packed forward has none")
        block.tp_group = None
        block.forward = MethodType(packed_forward, block)
    return len(blocks)


def packed_forward(block: nn.Module, hidden_states: torch.Tensor, attention_mask: PackedMask | None = None, **_: Any) -> torch.Tensor:
    """The block's output ``(1, W, H)`` (under TP: this rank's sequence shard, reduce-scattered by
    ``out_proj``) for ``hidden_states`` ``(1, W, H)``: this CP window, every TP rank alike."""
    mask = attention_mask
    if not isinstance(mask, PackedMask) or not (mask.runs or mask.pieces is not None):
        raise ValueError(
            "a linear-attention layer trains on a PackedMask whose segments run in sequence order (positions"
            f" consecutive within each); got {type(mask).__name__}"
        )
    module = sys.modules[type(block).__module__]  # the family's own conv and delta-rule functions
    batch, length, _ = hidden_states.shape
    qkv = block.in_proj_qkv(hidden_states)  # (1, W, conv_dim / tp): a contiguous share of [q | k | v]
    z = block.in_proj_z(hidden_states)  # (1, W, this rank's value heads * head_v_dim)
    b, a = block.in_proj_b(hidden_states), block.in_proj_a(hidden_states)  # (1, W, value heads here)
    conv_weight = _local(block.conv1d.weight)  # (conv_dim / tp, 1, K)
    tp = block.tp_group
    if tp is not None:  # whole [q | k | v] on every TP rank, then this rank's heads of each
        channels = _head_channels(block, tp)
        qkv = gather_sequence(qkv, tp, dim=2).index_select(2, channels)
        conv_weight = gather_sequence(conv_weight, tp, dim=0).index_select(0, channels)
    value_dim = b.shape[-1] * block.head_v_dim  # this rank's value heads'
    key_dim = (conv_weight.shape[0] - value_dim) // 2
    mixed = torch.cat([qkv, b, a], dim=-1)  # (1, W, channels + 2 * value heads)
    if mask.runs:
        core = torch.cat([_core(block, module, mixed[:, s:e], conv_weight, key_dim, value_dim) for s, e in mask.runs], dim=1)
    else:
        pieces = mask.pieces
        if mask.cp_group is not None:
            mixed = gather_sequence(mixed, mask.cp_group, dim=1)  # (1, cp*W, .): every CP window, rank order
        kept = [
            _core(block, module, mixed.index_select(1, index), conv_weight, key_dim, value_dim).index_select(1, keep)
            for index, keep in zip(pieces.index, pieces.keep, strict=True)
        ]
        core = torch.cat(kept, dim=1).index_select(1, pieces.order)
    # (1, W, value heads, head_v_dim) -> gated norm per head -> out_proj
    core = core.reshape(-1, block.head_v_dim)
    z = z.reshape(-1, block.head_v_dim)
    if isinstance(block.norm.weight, DTensor):  # replicated weight: DTensor sums its gradient over the heads' ranks
        mesh = block.norm.weight.device_mesh
        core, z = (DTensor.from_local(t, mesh, [Shard(0)], run_check=False) for t in (core, z))
        out = block.norm(core, z).to_local()
    else:
        out = block.norm(core, z)
    return block.out_proj(out.reshape(batch, length, -1))


def _core(block, module, mixed: torch.Tensor, conv_weight: torch.Tensor, key_dim: int, value_dim: int) -> torch.Tensor:
    """One piece ``(1, L, channels + 2 * value heads)`` run from a zero conv window and state, as
    transformers' forward does without a cache: ``(1, L, value heads, head_v_dim)``."""
    batch, length, _ = mixed.shape
    channels = 2 * key_dim + value_dim
    heads = (mixed.shape[-1] - channels) // 2
    qkv, b, a = mixed.split([channels, heads, heads], dim=-1)
    qkv = module.causal_conv1d_fn(qkv.transpose(1, 2), conv_weight.squeeze(1), None, activation=block.activation)
    query, key, value = qkv.transpose(1, 2).split([key_dim, key_dim, value_dim], dim=-1)
    query = query.reshape(batch, length, -1, block.head_k_dim)
    key = key.reshape(batch, length, -1, block.head_k_dim)
    value = value.reshape(batch, length, -1, block.head_v_dim)
    beta = b.sigmoid()
    g = -_local(block.A_log).float().exp() * F.softplus(a.float() + _local(block.dt_bias))
    core, _ = module.torch_chunk_gated_delta_rule(
        query, key, value, g=g, beta=beta, initial_state=None, output_final_state=False, use_qk_l2norm_in_kernel=True
    )
    return core


def _local(param: torch.Tensor) -> torch.Tensor:
    return param.to_local() if isinstance(param, DTensor) else param


def _head_channels(block: nn.Module, tp_group) -> torch.Tensor:
    """This TP rank's channels of ``[q | k | v]``: its ``q`` and ``k`` heads' and its value heads'."""
    size, rank = dist.get_world_size(tp_group), dist.get_rank(tp_group)
    key_dim, value_dim = block.key_dim, block.value_dim
    k, v = key_dim // size, value_dim // size
    return torch.cat([
        torch.arange(rank * k, (rank + 1) * k), key_dim + torch.arange(rank * k, (rank + 1) * k),
        2 * key_dim + torch.arange(rank * v, (rank + 1) * v),
    ]).to(block.in_proj_b.weight.device)  # fmt: skip
