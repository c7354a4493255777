"""Mixture-of-experts layers as the trainer computes them (Qwen3-VL-MoE's sparse MLPs).

A sparse MLP has a router ``gate`` (``(E, H)``: one logit per expert) and ``E`` fused SwiGLU
``experts``. For a token with hidden state ``h``::

    p = softmax(W_gate h)                       # (E,) in float32 whatever the dtype, as the family does
    K = top-k experts of p                      # or, under routing replay, the rollout's recorded K
    w_e = p_e / sum_{j in K} p_j   for e in K   # the gate weights, always from this router
    y = sum_{e in K} w_e * down_e(silu(gate_e h) * up_e h)

``RoutedExperts`` takes the place of the model's own block (the same two children, so every
parameter keeps its checkpoint name) because the trainer needs what the block hides: the
router's logits for the load-balancing loss, a way to impose the experts ``K`` while the weights
``w`` keep their gradient to the router, and, under tensor parallelism, weights that are
distributed tensors the block's own loop cannot index.

**Routing replay** (``loss.routing_replay='rollout'``): the engine recorded which experts each
token went to in the rollout's forward (``records.ROUTED_EXPERTS``); the trainer sends the token
to those, so a policy one version newer, or other kernels, cannot send it elsewhere and change
its logprob by a jump (a swapped expert) instead of a slope. Only ``K`` is replayed: ``w`` comes
from this router's own softmax, renormalised over the recorded ``K``, so the router still learns.
A token without a record (``replay`` row of zeros) follows this router.

A token's ``k`` rows, sorted by expert (``train.expert_parallel.Dispatch``), run through
``LocalExperts``; under expert parallelism (``layout.ep``) they first travel to the EP rank that
holds their expert and come back by all-to-all, and the gate weights are applied where the token
lives. Under tensor parallelism (sequence parallel) each TP rank routes its own shard of the
sequence through whole experts, replicated over the TP group (EP splits them over the DP x CP
ranks only); the experts' and router's gradients are then summed over the TP group
(``_SumGradOverGroup``).

The load-balancing loss is the family's (Switch Transformer's, as transformers'
``load_balancing_loss_func``): for one sequence of ``N`` tokens through ``L`` sparse layers,

    f_e = (top-k picks of expert e over all layers and tokens) / (L N)
    P_e = (sum of p_e over all layers and tokens) / (L N)
    aux = E * sum_e f_e P_e

taken per sequence (a packed micro-batch differs between layouts; a sequence does not, so the
loss is the same for any DP x CP x TP), and averaged over the step's sequences. Only ``P`` carries
gradient; the counts of a sequence split over CP and TP ranks are summed over those ranks first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

from vlrl.models.routing import decode, is_sparse
from vlrl.train.expert_parallel import Dispatch, all_to_all, exchange_counts


class RoutedExperts(nn.Module):
    """A sparse MLP computed by the trainer; ``replay`` (set before a forward: ``(S, k)`` recorded
    expert ids + 1 of this rank's tokens, 0 where none; None: no replay) imposes the experts;
    ``router_logits`` holds the last forward's ``(S, E)``."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.gate = block.gate
        self.experts = LocalExperts(block.experts)
        self.num_experts = int(block.gate.num_experts)
        self.top_k = int(block.gate.top_k)
        self.tp_group: Any = None
        self.ep_group: Any = None
        """Under expert parallelism, the ranks that split the experts (``train.expert_parallel``)."""
        self.replay: torch.Tensor | None = None
        self.router_logits: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        h = x.reshape(-1, shape[-1])  # (S, H)
        logits = F.linear(h, _local(self.gate.weight, self.tp_group))  # (S, E)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)  # float32 in any dtype, as the family routes
        ids = torch.topk(probs, self.top_k, dim=-1).indices  # (S, k)
        if self.replay is not None:
            if self.replay.shape != ids.shape:
                raise ValueError(
                    f"routing replay: {tuple(self.replay.shape)} records for {h.shape[0]} tokens; expected (tokens, {self.top_k})"
                )
            recorded = decode(self.replay.to(h.device))  # (S, k), -1 where no record
            ids = torch.where((recorded >= 0).all(-1, keepdim=True), recorded, ids)
        picked = probs.gather(1, ids)  # (S, k)
        weights = (picked / picked.sum(-1, keepdim=True)).to(h.dtype)  # (S, k)
        self.router_logits = logits
        plan = Dispatch.build(ids, self.num_experts)
        rows = h.index_select(0, plan.token)  # (S k, H) in expert order
        if self.ep_group is None:
            y = self.experts(rows, plan.expert_counts, self.tp_group)
        else:  # to the ranks holding the experts and back (``train.expert_parallel``)
            arrival = exchange_counts(plan, self.ep_group, h.device)
            send = plan.send_splits(dist.get_world_size(self.ep_group))
            received = all_to_all(rows, send, arrival.recv_splits, self.ep_group)  # (R, H) by source
            done = self.experts(arrival.by_expert(received), arrival.expert_counts, self.tp_group)
            y = all_to_all(arrival.by_source(done), arrival.recv_splits, send, self.ep_group)
        y = y * weights[plan.token, plan.slot, None]  # (S k, H)
        return torch.zeros_like(h).index_add(0, plan.token, y.to(h.dtype)).reshape(shape)


class LocalExperts(nn.Module):
    """The fused SwiGLU experts this rank holds (every one, or ``E / ep`` under expert
    parallelism), under the model's names; a module of its own so that FSDP2 can shard them apart
    from their layer (over the ranks holding the same experts) and gather them before its forward."""

    def __init__(self, experts: nn.Module) -> None:
        super().__init__()
        self.gate_up_proj = experts.gate_up_proj  # (E, 2 I, H)
        self.down_proj = experts.down_proj  # (E, H, I)
        self.act_fn = experts.act_fn

    def forward(self, rows: torch.Tensor, counts: list[int], tp_group: Any = None) -> torch.Tensor:
        """``rows`` ``(sum(counts), H)`` grouped by local expert, ``counts[j]`` for expert ``j``;
        every expert runs, on no rows too, so that each holds a gradient on every rank."""
        gate_up, down = (_local(p, tp_group) for p in (self.gate_up_proj, self.down_proj))
        if gate_up.shape[0] != len(counts):
            raise ValueError(f"{len(counts)} expert row counts for {gate_up.shape[0]} local experts")
        out = []
        for e, chunk in enumerate(rows.split(counts)):
            gate, up = F.linear(chunk, gate_up[e]).chunk(2, dim=-1)
            out.append(F.linear(self.act_fn(gate) * up, down[e]))
        return torch.cat(out)


def route_through_trainer(language_model: nn.Module) -> list[RoutedExperts]:
    """Put a ``RoutedExperts`` in place of every sparse MLP of ``language_model``'s layers (in
    place, names kept); returns them in layer order (empty for a dense model)."""
    routed = []
    for layer in language_model.layers:
        if is_sparse(layer.mlp):
            layer.mlp = RoutedExperts(layer.mlp)
            routed.append(layer.mlp)
    return routed


def balance_loss(layers: Sequence[RoutedExperts], segments: np.ndarray, num_segments: int, groups: Sequence[Any]) -> torch.Tensor:
    """``sum_s aux_s`` over this rank's share of the last forward's sequences (module docstring):
    ``segments`` ``(S,)`` each token's sequence in the micro-batch (< 0: padding), ``groups`` the
    process groups (CP, TP; None for a size of 1) whose ranks hold the other tokens of the same
    sequences. Collective over ``groups``; summed over them it is the micro-batch's whole loss."""
    logits = [layer.router_logits for layer in layers]
    device = logits[0].device
    seg = torch.as_tensor(segments, dtype=torch.long, device=device)
    real = seg >= 0
    seg = seg[real]
    n, experts, top_k = max(num_segments, 1), layers[0].num_experts, layers[0].top_k
    dtype = torch.promote_types(logits[0].dtype, torch.float32)
    counts = torch.zeros(n, experts + 1, dtype=torch.float64, device=device)  # picks per expert, then tokens
    probs = torch.zeros(n, experts, dtype=dtype, device=device)
    for layer_logits in logits:
        p = torch.softmax(layer_logits[real].to(dtype), dim=-1)  # (S', E)
        picks = F.one_hot(torch.topk(p, top_k, dim=-1).indices, experts).sum(1)  # (S', E)
        counts[:, :experts].index_add_(0, seg, picks.double())
        probs = probs.index_add(0, seg, p)
    counts[:, experts].index_add_(0, seg, torch.ones_like(seg, dtype=torch.float64))
    for group in groups:
        if group is not None:
            dist.all_reduce(counts, group=group)
    rows = (counts[:, experts] * len(layers)).clamp(min=1)  # L N per sequence
    scale = experts * counts[:, :experts] / rows[:, None] ** 2  # E f_e / (L N): no gradient
    return (scale.to(dtype) * probs).sum()


class _SumGradOverGroup(torch.autograd.Function):
    """Identity forward; backward sums the gradient over ``group`` (a weight every TP rank holds
    whole and applies to its own tokens)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def _local(param: torch.Tensor, tp_group: Any) -> torch.Tensor:
    """``param``'s whole value on this rank (a replicated DTensor under TP), its gradient summed
    over ``tp_group``."""
    if isinstance(param, DTensor):
        param = param.to_local()
    return param if tp_group is None else _SumGradOverGroup.apply(param, tp_group)
