"""Bytes that cross between ranks, counted at the collectives a benchmark rank really calls.

``CollectiveBytes().install()`` replaces ``torch.distributed.all_to_all_single``, ``all_gather``
and ``all_gather_into_tensor`` in this process with wrappers that run the real collective, then,
while a ``counting()`` block is open, add to its ``Traffic`` what this rank sent to and received
from the other ranks of the call's group (callers that look the functions up on ``torch.distributed``
at call time, as ``vlrl.train.redistribute`` does, go through them):

- ``all_to_all_single``: the split rows of the input bound for other ranks, the split rows of the
  output that came from them (``bytes = rows * row bytes``; equal splits when none are given);
- an all-gather: ``(group size - 1)`` copies of the input sent, every other rank's part received
  (padding included: it is on the wire).

A rank's own split or part never leaves it and is not counted. Summed over ranks, sent equals
received; the benchmark reports the received sum.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist

WRAPPED = ("all_to_all_single", "all_gather", "all_gather_into_tensor")


@dataclass(slots=True)
class Traffic:
    """One rank's collective traffic in one ``counting()`` block."""

    sent: int = 0
    """Bytes this rank sent to other ranks."""
    received: int = 0
    """Bytes it received from other ranks."""
    calls: int = 0


class CollectiveBytes:
    """Counting wrappers around this process's collectives; see the module docstring."""

    def __init__(self) -> None:
        self._current: Traffic | None = None
        self._originals: dict[str, object] = {}

    def install(self) -> CollectiveBytes:
        for name in WRAPPED:
            original = getattr(dist, name)
            self._originals[name] = original
            setattr(dist, name, functools.wraps(original)(functools.partial(getattr(self, f"_{name}"), original)))
        return self

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()

    @contextmanager
    def counting(self) -> Iterator[Traffic]:
        """The traffic of the collectives called inside the block (an outer block resumes after)."""
        outer, self._current = self._current, Traffic()
        try:
            yield self._current
        finally:
            self._current = outer

    def _add(self, sent: int, received: int) -> None:
        if self._current is not None:
            self._current.sent += sent
            self._current.received += received
            self._current.calls += 1

    def _all_to_all_single(
        self, original, output, input, output_split_sizes=None, input_split_sizes=None, group=None, async_op=False
    ):
        work = original(output, input, output_split_sizes, input_split_sizes, group=group, async_op=async_op)
        me, size = dist.get_rank(group), dist.get_world_size(group)
        self._add(_off_self(input, input_split_sizes, me, size), _off_self(output, output_split_sizes, me, size))
        return work

    def _all_gather(self, original, tensor_list, tensor, group=None, async_op=False):
        work = original(tensor_list, tensor, group=group, async_op=async_op)
        me, size = dist.get_rank(group), dist.get_world_size(group)
        self._add((size - 1) * tensor.nbytes, sum(t.nbytes for i, t in enumerate(tensor_list) if i != me))
        return work

    def _all_gather_into_tensor(self, original, output_tensor, input_tensor, group=None, async_op=False):
        work = original(output_tensor, input_tensor, group=group, async_op=async_op)
        size = dist.get_world_size(group)
        self._add((size - 1) * input_tensor.nbytes, output_tensor.nbytes - input_tensor.nbytes)
        return work


def _off_self(tensor: torch.Tensor, splits: list[int] | None, me: int, size: int) -> int:
    """Bytes of ``tensor``'s dim-0 splits other than rank ``me``'s (equal splits when none)."""
    rows = tensor.shape[0] if tensor.dim() else 0
    row_bytes = tensor.nbytes // rows if rows else 0
    own = splits[me] if splits else rows // size
    return (rows - own) * row_bytes
