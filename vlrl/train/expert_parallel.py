"""Expert parallelism: a sparse layer's routed rows go to the rank holding their expert and back.

Under ``layout.ep`` each of the ``ep`` ranks of an EP group (``Layout.ep_group``) holds ``E / ep``
whole experts, EP rank ``r`` experts ``[r E/ep, (r+1) E/ep)``. A sparse layer on one rank, whose
``S`` tokens each picked ``k`` experts:

1. **Dispatch plan** (``Dispatch``): the ``S k`` (token, slot) pairs, stably sorted by expert,
   so rows bound for one rank are contiguous (experts are split in order) and, within them,
   grouped by expert; ``expert_counts[e]`` rows go to expert ``e``.
2. **Counts exchange**: one ``all_to_all_single`` of the ``E`` counts (``E / ep`` to each rank), so
   every rank learns ``arrivals[s, j]``, the rows EP rank ``s`` sends its local expert ``j``.
3. **Dispatch**: ``all_to_all_single`` of the sorted hidden rows (``Dispatch.send_splits``); they
   arrive grouped by source, each source's in expert order. ``Arrival`` reorders them by local
   expert (stably: source by source) for the experts, and back.
4. **Combine**: the experts' outputs go back by the reverse all-to-all, then each row times its
   gate weight is added into its token, on the token's own rank, so the router's gradient never
   travels.

``_AllToAll``'s backward is the reverse all-to-all of the gradient (the adjoint of a
permutation of rows between ranks), so an expert's gradient sums over every token of the EP
group routed to it, and each token's hidden-state gradient comes home. With ``ep = 1`` the same
plan runs without the exchanges: every expert is local.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Where one rank's routed rows go: its ``(S, k)`` expert ids, flattened and sorted by expert."""

    token: torch.Tensor
    """``(S k,)`` each routed row's token, in expert order (stable: tokens ascending within one)."""
    slot: torch.Tensor
    """``(S k,)`` the row's top-k slot (which gate weight it takes)."""
    expert_counts: list[int]
    """``(E,)`` rows routed to each expert."""

    @classmethod
    def build(cls, ids: torch.Tensor, num_experts: int) -> Dispatch:
        """The plan of ``ids`` ``(S, k)``, expert ids in ``[0, num_experts)``."""
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        top_k = ids.shape[-1]
        counts = torch.bincount(flat, minlength=num_experts)
        if counts.numel() != num_experts:
            raise ValueError(f"expert ids up to {int(flat.max())}; the layer has {num_experts} experts")
        return cls(token=order // top_k, slot=order % top_k, expert_counts=counts.tolist())

    def send_splits(self, ep: int) -> list[int]:
        """Rows for each EP rank: the counts of its ``E / ep`` experts summed."""
        per_rank = len(self.expert_counts) // ep
        return [sum(self.expert_counts[r * per_rank : (r + 1) * per_rank]) for r in range(ep)]


@dataclass(frozen=True, slots=True)
class Arrival:
    """The rows an EP rank receives, ``arrivals[s, j]`` from source ``s`` for local expert ``j``,
    grouped by source as ``all_to_all_single`` delivers them."""

    order: torch.Tensor
    """``(R,)`` received rows in local-expert order: ``received[order]`` groups them by expert."""
    expert_counts: list[int]
    """``(E / ep,)`` rows for each local expert."""
    recv_splits: list[int]
    """``(ep,)`` rows from each source."""

    @classmethod
    def build(cls, arrivals: torch.Tensor) -> Arrival:
        """From ``arrivals`` ``(ep, E / ep)`` row counts."""
        sources, local = arrivals.shape
        expert_of_row = torch.arange(local, device=arrivals.device).repeat(sources).repeat_interleave(arrivals.reshape(-1))
        return cls(
            order=torch.argsort(expert_of_row, stable=True),
            expert_counts=arrivals.sum(0).tolist(),
            recv_splits=arrivals.sum(1).tolist(),
        )

    def by_expert(self, received: torch.Tensor) -> torch.Tensor:
        """The received rows (grouped by source) grouped by local expert, for the experts."""
        return received[self.order]

    def by_source(self, done: torch.Tensor) -> torch.Tensor:
        """The experts' output rows (grouped by local expert) back in arrival order, to return."""
        return torch.empty_like(done).index_copy(0, self.order, done)


def exchange_counts(dispatch: Dispatch, group: Any, device: torch.device) -> Arrival:
    """Step 2 of the module docstring: every rank's counts for this rank's experts. Collective over ``group``."""
    ep = dist.get_world_size(group)
    sent = torch.tensor(dispatch.expert_counts, dtype=torch.int64, device=device)
    received = torch.empty_like(sent)  # (ep * E/ep,): source-major
    dist.all_to_all_single(received, sent, group=group)
    return Arrival.build(received.reshape(ep, -1))


def all_to_all(rows: torch.Tensor, send_splits: list[int], recv_splits: list[int], group: Any) -> torch.Tensor:
    """``rows`` ``(sum(send_splits), H)`` sent ``send_splits[r]`` to EP rank ``r`` (in order);
    returns ``(sum(recv_splits), H)`` grouped by source. Differentiable; collective over ``group``."""
    return _AllToAll.apply(rows, send_splits, recv_splits, group)


class _AllToAll(torch.autograd.Function):
    """Rows between ranks; backward sends each row's gradient back where the row came from."""

    @staticmethod
    def forward(ctx, rows: torch.Tensor, send_splits: list[int], recv_splits: list[int], group: Any) -> torch.Tensor:
        ctx.splits = (send_splits, recv_splits, group)
        return _exchange(rows, send_splits, recv_splits, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        send_splits, recv_splits, group = ctx.splits
        return _exchange(grad, recv_splits, send_splits, group), None, None, None


def _exchange(rows: torch.Tensor, send_splits: list[int], recv_splits: list[int], group: Any) -> torch.Tensor:
    out = rows.new_empty((sum(recv_splits), *rows.shape[1:]))
    dist.all_to_all_single(out, rows.contiguous(), recv_splits, send_splits, group=group)
    return out
