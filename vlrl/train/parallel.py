"""``Parallel``: the ``torch.distributed`` process groups of one training rank, built from a ``Layout``.

Nothing about the mesh is decided here: its dimensions are ``Layout.mesh_dims`` (the layout's
rank order, TP fastest), so mesh coordinates and ``Layout.coords`` agree, and every rank question
(coordinates, group members) is the layout's. What each dimension does to the model:

* ``tp``: DTensor tensor parallelism of the LLM backbone (``tp_mesh``);
* ``cp``: keys/values all-gathered over ``cp_group`` in every attention layer;
* ``dp`` x ``cp``: FSDP2 shards the backbone over the flattened ``dp_cp_mesh`` and sums its
  gradients there (CP ranks saw different tokens of the same micro-batch: their gradients add);
* ``ep`` (mixture of experts): each sparse layer's experts are split over ``ep_group`` and
  FSDP2-sharded over the ranks holding the same ones; those live on a second mesh over the same
  ranks, ``Layout.expert_mesh_dims`` ``(edp, ep, tp)``, so that an expert's DTensor (split over
  ``ep``) and its FSDP mesh (``edp``) share a root, as FSDP2 requires;
* the whole world: the vision encoder is replicated on every rank and each rank encodes other
  images, so encoder gradients are summed over ``world_group``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from vlrl.pack.layout import Coords, Layout


@dataclass(frozen=True, slots=True)
class Parallel:
    layout: Layout
    rank: int
    tp_mesh: DeviceMesh
    """The ``tp`` dimension of the mesh (``Layout.mesh_dims``: ``(dp, cp, tp)``)."""
    dp_cp_mesh: DeviceMesh
    cp_group: Any
    """None when cp = 1."""
    dp_group: Any
    """Ranks at the same (cp, tp): they add up loss counts of different micro-batches."""
    world_group: Any
    expert_mesh: DeviceMesh | None = None
    """``(edp, ep, tp)`` (``Layout.expert_mesh_dims``); None when ep = 1."""
    ep_group: Any = None
    """Ranks splitting the experts between them (consecutive DP x CP ranks at one TP coordinate,
    ``pack.layout``); None when ep = 1."""

    @classmethod
    def init(cls, layout: Layout, device_type: str = "cpu") -> Parallel:
        """Build the mesh and groups; collective over the default process group, which must have
        exactly ``layout.world_size`` ranks (any other count is refused before any collective)."""
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialised; start the ranks with init_process_group")
        layout.check_world(dist.get_world_size())
        names, sizes = zip(*layout.mesh_dims, strict=True)
        mesh = init_device_mesh(device_type, sizes, mesh_dim_names=names)
        experts = None
        if layout.ep > 1:
            names, sizes = zip(*layout.expert_mesh_dims, strict=True)
            experts = init_device_mesh(device_type, sizes, mesh_dim_names=names)
        return cls(
            layout=layout,
            rank=dist.get_rank(),
            tp_mesh=mesh["tp"],
            dp_cp_mesh=mesh["dp", "cp"]._flatten("dp_cp"),
            cp_group=mesh.get_group("cp") if layout.cp > 1 else None,
            dp_group=mesh.get_group("dp"),
            world_group=dist.group.WORLD,
            expert_mesh=experts,
            ep_group=None if experts is None else experts.get_group("ep"),
        )

    @property
    def coords(self) -> Coords:
        """This rank's ``(dp, cp, tp)`` coordinates (``Layout.coords``)."""
        return self.layout.coords(self.rank)

    @property
    def is_logger(self) -> bool:
        """The rank that reports step metrics and writes shared files."""
        return self.rank == 0
