"""The TP-group packer: one per TP group, one read-only in-memory copy of each CP window.

Every rank of a TP group trains on the same CP window (with sequence parallelism each holds a
1/tp shard of activations, but embedding, attention and loss still need the whole window), so
one process cuts it and the others map it. Per micro-batch, each rank calls
``RankPacker.get(i)``::

    TP leader (the group's first rank)                 other ranks of the TP group
    WindowCut.of: ranges, shapes, images (metadata)
    shared.create: one segment in /dev/shm
    fill: get_range per range and field, written
          in place into the segment
    broadcast_object_list([SharedWindow]) ---------->  the handle (a few hundred bytes)
    attach read-only                                   attach read-only
    barrier over the TP group <--------------------->  barrier
    unlink the segment's name
    every rank: read-only views of the one copy; dropping them after the micro-batch frees it

Only the leader touches the store, and it reads only the chunks its window overlaps. TP groups
are runs of consecutive ranks on one node (``Layout``), so the node's tmpfs reaches them all.
A leader that fails to pack sends its error instead of a handle: the whole group raises.

``torch.distributed`` is imported where it is used, so that the control plane, which plans with
``vlrl.pack``, does not load torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, NamedTuple

from vlrl.config import NonEmpty
from vlrl.errors import PicklesWhole
from vlrl.pack import shared
from vlrl.pack.layout import Layout
from vlrl.pack.packed import ImagePlacement, PackedWindow
from vlrl.pack.plan import MicroBatch, Plan
from vlrl.pack.window import WindowCut, cut_window
from vlrl.records import SeqMeta
from vlrl.store import PayloadStore, StoreError


class PackError(PicklesWhole, RuntimeError):
    """A TP group could not get its window; names the rank and micro-batch. ``payload_lost``: the
    leader's cause was a store error (a key or shard gone), not a bug."""

    def __init__(self, message: str, *, payload_lost: bool = False) -> None:
        super().__init__(message)
        self.payload_lost = payload_lost


class SharedWindow(NamedTuple):
    """A window in a shared segment: what the leader broadcasts to its TP group."""

    segment: shared.SegmentHandle
    num_tokens: int
    images: tuple[ImagePlacement, ...]

    def attach(self) -> PackedWindow:
        """Read-only views of the segment (it must still have its name: see ``shared``)."""
        arrays = shared.attach(self.segment)
        return PackedWindow.from_arrays(arrays, num_tokens=self.num_tokens, images=self.images)


class TPGroupPacker:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Cuts each CP window of a TP group once, into memory the group's ranks share."""

        shm_dir: Annotated[str, NonEmpty()] = "/dev/shm"
        """Directory on a memory-backed filesystem (tmpfs) of the node, for the shared windows."""

        def build(
            self,
            *,
            store: PayloadStore,
            layout: Layout,
            plan: Plan,
            metas: Iterable[SeqMeta],
            group_ranks: Sequence[int],
            fields: Sequence[str],
        ) -> TPGroupPacker:
            return TPGroupPacker(
                self, store=store, layout=layout, plan=plan, metas=metas, group_ranks=group_ranks, fields=fields
            )

    def __init__(
        self,
        config: TPGroupPacker.Config,
        *,
        store: PayloadStore,
        layout: Layout,
        plan: Plan,
        metas: Iterable[SeqMeta],
        group_ranks: Sequence[int],
        fields: Sequence[str],
    ) -> None:
        """``fields``: the payload fields the trainer's loss needs (``records.fields_for``)."""
        if plan.dp != layout.dp:
            raise ValueError(f"plan is for dp={plan.dp} ranks but the layout has dp={layout.dp}")
        if not group_ranks or list(group_ranks) != layout.tp_group(group_ranks[0]):
            raise ValueError(f"group_ranks={list(group_ranks)} is not a TP group of {layout}")
        if not os.path.isdir(config.shm_dir):
            raise ValueError(f"TPGroupPacker.Config.shm_dir={config.shm_dir!r} is not a directory")
        self.config = config
        self.store = store
        self.layout = layout
        self.plan = plan
        self.metas = {meta.key: meta for meta in metas}
        self.fields = tuple(fields)
        self.dp_rank, self.cp_rank, _ = layout.coords(group_ranks[0])

    def window(self, micro_batch: int) -> PackedWindow:
        """The group's window of its DP rank's micro-batch ``micro_batch``, in private memory."""
        return cut_window(self.store, self.layout, self._micro_batch(micro_batch), self.cp_rank, self.metas, self.fields)

    def publish(self, micro_batch: int) -> SharedWindow:
        """Cut the window into a new shared segment; the caller owns the segment's name."""
        cut = WindowCut.of(
            self.store, self.layout, self._micro_batch(micro_batch), self.cp_rank, self.metas, self.fields
        )
        segment, arrays = shared.create(self.config.shm_dir, cut.array_specs())
        try:
            cut.fill(self.store, arrays)
        except BaseException:
            shared.unlink(segment)
            raise
        return SharedWindow(segment, cut.num_tokens, cut.images)

    def _micro_batch(self, index: int) -> MicroBatch:
        if not 0 <= index < self.plan.num_micro_batches:
            raise ValueError(f"micro-batch {index} out of range; the plan has {self.plan.num_micro_batches} per rank")
        return self.plan.ranks[self.dp_rank][index]


@dataclass(frozen=True, slots=True)
class _LeaderFailure:
    """What a TP leader that could not pack broadcasts instead of its window."""

    text: str
    payload_lost: bool


class RankPacker:
    """What one training rank asks for its window: the TP leader packs and shares, the others map."""

    def __init__(self, rank: int, layout: Layout, packer: TPGroupPacker | None, tp_group: Any) -> None:
        self.rank = rank
        self.group_ranks = layout.tp_group(rank)
        self.leader = self.group_ranks[0]
        self._packer = packer
        self._tp_group = tp_group

    def get(self, micro_batch: int) -> PackedWindow:
        """This rank's read-only view of its TP group's window of ``micro_batch``. Collective
        over the TP group; drop the window after the micro-batch to free it."""
        window = self._receive(micro_batch)
        try:
            return window.attach()
        except FileNotFoundError as error:
            raise PackError(
                f"rank {self.rank} cannot map {window.segment.path} from TP leader rank {self.leader}: the ranks of"
                " a TP group must share a node"
            ) from error
        finally:
            if len(self.group_ranks) > 1:  # every rank has mapped the segment (or failed to)
                _dist().barrier(group=self._tp_group)
            if self._packer is not None:
                shared.unlink(window.segment)

    def _receive(self, micro_batch: int) -> SharedWindow:
        """The window the leader packs, or its error, broadcast to the whole TP group."""
        message: list[SharedWindow | _LeaderFailure | None] = [None]
        failure = None
        if self._packer is not None:
            try:
                message[0] = self._packer.publish(micro_batch)
            except Exception as error:
                message[0], failure = _LeaderFailure(f"{type(error).__name__}: {error}", isinstance(error, StoreError)), error
        if len(self.group_ranks) > 1:
            _dist().broadcast_object_list(message, src=self.leader, group=self._tp_group)
        if failure is not None:
            raise failure
        if isinstance(message[0], _LeaderFailure):
            raise PackError(
                f"rank {self.rank}: TP leader rank {self.leader} failed to pack micro-batch {micro_batch}:"
                f" {message[0].text}",
                payload_lost=message[0].payload_lost,
            )
        return message[0]


def new_tp_group(layout: Layout) -> Any:
    """This rank's TP process group for the packer (None for tp = 1). Collective: every rank
    calls it once. Gloo whatever the trainer's backend: the packer only sends small CPU objects."""
    dist = _dist()
    layout.check_world(dist.get_world_size())
    if layout.tp == 1:
        return None
    groups = [layout.tp_group(rank) for rank in range(0, layout.world_size, layout.tp)]
    mine, _ = dist.new_subgroups_by_enumeration(groups, backend="gloo")
    return mine


def packer_for_rank(
    rank: int,
    *,
    store: PayloadStore,
    layout: Layout,
    plan: Plan,
    metas: Iterable[SeqMeta],
    tp_group: Any,
    fields: Sequence[str],
    config: TPGroupPacker.Config | None = None,
) -> RankPacker:
    """The packer rank ``rank`` calls each micro-batch; ``tp_group`` is its ``new_tp_group``.
    Only a TP leader keeps the store and metadata; the other ranks never read the store."""
    group_ranks = layout.tp_group(rank)
    if layout.tp > 1 and (tp_group is None or sorted(_dist().get_process_group_ranks(tp_group)) != group_ranks):
        raise ValueError(f"tp_group of rank {rank} is not its TP group {group_ranks}; pass new_tp_group(layout)")
    if rank != group_ranks[0]:
        return RankPacker(rank, layout, None, tp_group)
    packer = (config or TPGroupPacker.Config()).build(
        store=store, layout=layout, plan=plan, metas=metas, group_ranks=group_ranks, fields=fields
    )
    return RankPacker(rank, layout, packer, tp_group)


def _dist() -> Any:
    import torch.distributed

    return torch.distributed
