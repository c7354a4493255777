"""Group and batch records: what the accept-time hook decides about a group, and what the driver
hands the trainer. Metadata only, like ``SeqMeta``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from vlrl.records.sequence import SeqMeta

GroupStatus = Literal["accepted", "rejected", "dropped"]


class GroupError(ValueError):
    """Records that do not form one group: empty, mixed group ids, or a key twice."""


def group_id_of(metas: Sequence[SeqMeta]) -> str:
    """The group id shared by ``metas``; a clear error when they are not one group."""
    if not metas:
        raise GroupError("a group needs at least one SeqMeta, got none")
    ids = sorted({m.group_id for m in metas})
    if len(ids) != 1:
        raise GroupError(f"a group has one group_id; these records have {ids}")
    keys = [m.key for m in metas]
    if len(set(keys)) != len(keys):
        twice = sorted({k for k in keys if keys.count(k) > 1})
        raise GroupError(f"group {ids[0]!r}: keys {twice} appear more than once")
    return ids[0]


@dataclass(frozen=True, slots=True)
class GroupDecision:
    """The accept-time hook's verdict on one finished group."""

    group_id: str
    """The group decided on."""
    status: GroupStatus
    """``rejected`` by the sampler, ``dropped`` for all-zero advantages, else ``accepted``."""
    reason: str
    """Why, in words (the sampler's pass rate, the drop cause)."""
    keys: tuple[str, ...]
    """The group's store keys, in the order of the metas the hook was given."""
    advantages: tuple[float, ...] = ()
    """Scalar advantage per sequence after shaping (OPD: the mean per-token advantage over the
    response, for metrics); empty when the sampler rejected the group first."""
    step_turns: tuple[int, int] = (0, 0)
    """Under step-level credit: (turns that share their state with another turn of the group,
    turns); (0, 0) without it."""

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"


@dataclass(frozen=True, slots=True)
class AcceptedGroup:
    """A group the hook accepted, buffered by the driver until a batch takes it."""

    group_id: str
    """The group's id."""
    source: str
    """The data source it counts towards."""
    metas: tuple[SeqMeta, ...]
    """Its sequences."""
    decision: GroupDecision
    """The hook's decision (its step-level credit counts go to the step's metrics)."""
    policy_version: int
    """Oldest policy version that sampled any of its tokens."""


@dataclass(frozen=True, slots=True)
class Batch:
    """One training step's groups: every source's share."""

    step: int
    """The training step it is for, from 1."""
    groups: tuple[AcceptedGroup, ...]
    """Its groups, source by source."""
    min_version: int | None = None
    """Oldest policy version whose tokens it trains (None: all): older tokens carry no loss."""

    @property
    def sequences(self) -> list[SeqMeta]:
        return [meta for group in self.groups for meta in group.metas]

    def per_source(self) -> dict[str, int]:
        return dict(Counter(group.source for group in self.groups))
