"""Tensor parallelism of the LLM backbone: the DTensor plan every decoder layer is split by, LoRA
adapters split as their layers are.

The plan is torchtitan's, sequence parallel: activations between blocks are sequence shards
(``Shard(1)``); norms ``SequenceParallel``; a block's input is gathered to a replicated DTensor,
q/k/v and gate/up are column-wise, o/down row-wise back to sequence shards; embeddings row-wise;
the LM head column-wise (vocabulary shards, redistributed to sequence shards by the caller). A
linear-attention block (Qwen3.5's gated DeltaNet) takes its gathered input as a local tensor and
splits its projections by head, the rest of its parameters by channel and value head (its forward
gathers a rank's heads: ``train.linear_attention``). A routed block (``train.moe``) keeps its
input as sequence shards: each TP rank routes its own tokens through whole experts, replicated
over TP unless expert parallelism splits them.

A PEFT LoRA layer (``y = W x + s B A x``) is split so that each rank's share of ``y`` needs no
communication but the base's (``linear``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from vlrl.train.lora import ADAPTER
from vlrl.train.moe import RoutedExperts


def parallelize_language_model(lm: nn.Module, lm_head: nn.Module, tp_mesh, experts: bool = True) -> None:
    """Split ``lm`` (the LLM backbone: embeddings, decoder layers, final norm) and ``lm_head`` over
    ``tp_mesh`` in place. ``experts``: whether the routed experts are replicated over TP here (not
    under expert parallelism, which splits them)."""
    parallelize_module(lm, tp_mesh, {
        "embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
    })  # fmt: skip
    parallelize_module(lm_head, tp_mesh, ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False))
    for layer in lm.layers:
        sparse = isinstance(layer.mlp, RoutedExperts)
        if sparse:  # each TP rank routes its own tokens through whole experts (``train.moe``)
            distribute_module(layer.mlp if experts else layer.mlp.gate, tp_mesh)
            layer.mlp.tp_group = tp_mesh.get_group()
        mlp = {
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Shard(1),), use_local_output=True),
        } if sparse else {
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            **linear(layer, "mlp.gate_proj", ColwiseParallel()),
            **linear(layer, "mlp.up_proj", ColwiseParallel()),
            **linear(layer, "mlp.down_proj", RowwiseParallel(output_layouts=Shard(1))),
        }  # fmt: skip
        linear_attn = getattr(layer, "linear_attn", None) is not None  # a DeltaNet layer (Qwen3.5)
        attention = _linear_attention_plan(layer) if linear_attn else {
            "self_attn": PrepareModuleInput(
                input_kwarg_layouts={"hidden_states": Shard(1)}, desired_input_kwarg_layouts={"hidden_states": Replicate()}
            ),
            **linear(layer, "self_attn.q_proj", ColwiseParallel()),
            **linear(layer, "self_attn.k_proj", ColwiseParallel()),
            **linear(layer, "self_attn.v_proj", ColwiseParallel()),
            **linear(layer, "self_attn.o_proj", RowwiseParallel(output_layouts=Shard(1))),
            # Qwen3's per-head q/k norms see this rank's heads, (B, T, heads / tp, head_dim):
            # the weight is replicated and its gradient summed over the TP ranks' heads.
            **{
                f"self_attn.{norm}": SequenceParallel(sequence_dim=2, use_local_output=True)
                for norm in ("q_norm", "k_norm")
                if hasattr(layer.self_attn, norm)
            },
        }  # fmt: skip
        parallelize_module(layer, tp_mesh, {
            "input_layernorm": SequenceParallel(),
            **attention,
            "post_attention_layernorm": SequenceParallel(),
            **mlp,
        })  # fmt: skip
        if linear_attn:
            _distribute_linear_attention(layer.linear_attn, tp_mesh)


def linear(parent: nn.Module, name: str, style: ColwiseParallel | RowwiseParallel) -> dict[str, ParallelStyle]:
    """The TP plan of ``parent``'s linear layer ``name``: ``{name: style}``, or, when the layer is
    a PEFT LoRA layer (``y = W x + s B A x``), ``style`` on its frozen ``base_layer`` and its
    adapters split so that each rank's share of ``y`` needs no other communication than the base's:

    * column-parallel (``W`` split on its output dim; the input ``x`` a replicated DTensor):
      ``A`` ``(r, in)`` replicated, ``B`` column-parallel ``(out / tp, r)``: rank ``k``'s output
      columns get ``B_k (A x)``;
    * row-parallel (``W`` split on its input dim, ``x`` this rank's slice of it, the output
      reduce-scattered to sequence shards; ``style`` must say ``output_layouts=Shard(1)``):
      ``A`` row-parallel ``(r, in / tp)``, its partial sums ``A_k x_k`` reduce-scattered to this
      rank's tokens as the base's are, then ``B`` ``(out, r)`` replicated, applied token by token.

    Each product is then the single-process one but for the order of the sums over the TP split
    (parallel == serial to float rounding), and the extra traffic is the rank-``r`` intermediate
    of the row-parallel layers. Keeping both adapters replicated instead would gather a
    row-parallel layer's whole input (the MLP's width) on every rank and slice its output. The
    replicated adapter's gradient is summed over the TP ranks by DTensor, as a norm's is."""
    module = parent.get_submodule(name)
    if not hasattr(module, "base_layer"):
        return {name: style}
    a, b = f"{name}.lora_A.{ADAPTER}", f"{name}.lora_B.{ADAPTER}"
    if isinstance(style, ColwiseParallel):
        return {f"{name}.base_layer": style, a: _Replicated(), b: ColwiseParallel()}
    return {f"{name}.base_layer": style, a: RowwiseParallel(output_layouts=Shard(1)), b: SequenceParallel(use_local_output=True)}


def _linear_attention_plan(layer: nn.Module) -> dict[str, Any]:
    """The TP plan of a decoder layer's linear-attention block: the block's input gathered from
    sequence shards, its projections split by head (column-wise), ``out_proj`` row-wise back to
    sequence shards. ``_distribute_linear_attention`` splits the rest."""
    return {
        "linear_attn": PrepareModuleInput(
            input_kwarg_layouts={"hidden_states": Shard(1)}, desired_input_kwarg_layouts={"hidden_states": Replicate()},
            use_local_output=True,
        ),
        **{name: style for proj in ("qkv", "z", "b", "a") for name, style in linear(layer, f"linear_attn.in_proj_{proj}", ColwiseParallel()).items()},
        **linear(layer, "linear_attn.out_proj", RowwiseParallel(output_layouts=Shard(1))),
    }  # fmt: skip


def _distribute_linear_attention(block: nn.Module, tp_mesh) -> None:
    """Split ``block``'s remaining parameters over ``tp_mesh`` after its plan: ``conv1d`` by
    channel, ``dt_bias`` and ``A_log`` by value head (``Shard(0)``); the gated norm's weight
    replicated. The block then gathers its heads' channels over the TP group in
    ``linear_attention.packed_forward``. ``PolicyModel.parallelize`` has checked that the TP size
    divides both head counts."""
    def partition(name: str, module: nn.Module, mesh) -> None:
        targets = {"": ("dt_bias", "A_log"), "conv1d": ("weight",)}.get(name, ())
        for key in targets:
            param = module._parameters[key]
            sharded = nn.Parameter(distribute_tensor(param.data, mesh, [Shard(0)]), requires_grad=param.requires_grad)
            module.register_parameter(key, sharded)

    distribute_module(block, tp_mesh, partition)
    block.tp_group = tp_mesh.get_group()


class _Replicated(ParallelStyle):
    """Parameters replicated over the TP mesh. The input is a replicated DTensor (a full-attention
    block's, ``PrepareModuleInput``) or a plain tensor every TP rank holds alike (a DeltaNet block
    takes its input as a local tensor, ``_linear_attention_plan``): that is taken as a replicated
    DTensor, whose backward sums the TP ranks' partial input gradients, as the base layer's
    ``ColwiseParallel`` does with the same input."""

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        return distribute_module(module, device_mesh, input_fn=_replicated_input)


def _replicated_input(module: nn.Module, inputs: tuple, device_mesh) -> tuple:
    def replicated(x):
        plain = isinstance(x, torch.Tensor) and not isinstance(x, DTensor)
        return DTensor.from_local(x, device_mesh, [Replicate()], run_check=False) if plain else x

    return tuple(replicated(x) for x in inputs)
