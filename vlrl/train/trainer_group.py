"""``TrainerGroup``: the trainer's ranks as Ray actors on a placement group, driven as one.

Each ``TrainerWorker`` is one rank: it sets the ``torch.distributed`` environment variables that
``torchrun`` would set (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and calls
``init_distributed``, so the same ``Trainer`` code runs under ``torchrun``
or under Ray. Gloo on CPU, NCCL when the worker has a GPU. The driver only sends ``SeqMeta``
lists and gets metrics back; payloads go store -> packer -> rank, and weights go from rank 0 to
the engines through the Ray object store (``push_weights``): no file is written. A plug-in
encoder (``TrainerGroup.Config.encoder``) is resolved on the driver and built by every rank.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any

from encoders.spec import ResolvedEncoder
from vlrl.config import Ge, Gt
from vlrl.config.moved import moved_fields
from vlrl.pack import Layout
from vlrl.records import SeqMeta
from vlrl.train.trainer import RankModel, StepInputsLost, Trainer

log = logging.getLogger(__name__)


def init_distributed(timeout_s: float = 600.0) -> None:
    """``init_process_group`` from the ``torchrun`` environment variables: NCCL (plus gloo for CPU
    tensors) with a GPU, else gloo."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    backend = "gloo"
    if torch.cuda.is_available():  # NCCL for CUDA tensors; gloo still carries the few CPU ones
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "cpu:gloo,cuda:nccl"
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=timeout_s))


class TrainerWorker:
    """One rank of the group (a Ray actor)."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank = rank
        self.world = world
        self.trainer: Trainer | None = None

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0's node address and a free port there, for the process group's TCP store."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            return ray.util.get_node_ip_address(), s.getsockname()[1]

    def setup(
        self, address: str, port: int, layout: Layout, stage: TrainerGroup.Stage, model_path: str, store_config: Any,
        encoder: ResolvedEncoder | None,
    ) -> int:  # fmt: skip
        """Join the process group and build this rank's ``Trainer`` from ``stage`` as it is (the
        run plan checked the layout and LoRA); returns the model's parameter count."""
        os.environ.update(
            RANK=str(self.rank), WORLD_SIZE=str(self.world), LOCAL_RANK="0", MASTER_ADDR=address, MASTER_PORT=str(port)
        )
        init_distributed()
        plug_in = encoder.build(model_path) if encoder is not None else None
        self.trainer = Trainer(
            stage.rank, model_path=model_path, store=store_config.build(), layout=layout, encoder=plug_in, steps=stage.steps
        )
        return sum(p.numel() for p in self.trainer.model.parameters())

    def step(self, metas: list[SeqMeta], min_version: int | None = None, policy_version: int | None = None) -> dict[str, float]:
        return self.trainer.step(metas, min_version, policy_version)

    def weights(self, merged: bool = False) -> dict | None:
        """Rank 0 returns what a push carries (``Trainer.push_state``; Ray stores the result in the
        object store); others None."""
        return self.trainer.push_state(merged)

    def save(self, path: str, extra: dict) -> str:
        return str(self.trainer.save(path, extra))

    def load(self, path: str) -> dict:
        return self.trainer.load(path)

    def close(self) -> None:
        import torch.distributed as dist

        self.trainer.close()
        dist.destroy_process_group()


class TrainerGroup:
    _adapters_only = False
    """Whether pushes carry LoRA adapters (``Trainer.push_state``) rather than every weight."""
    _first_push: Any = None
    """Under LoRA, the ref of this group's first push: the one that carries the whole base model."""

    @dataclass(kw_only=True, slots=True)
    class Config(RankModel, moved_fields("trainer")):
        """Trainer ranks as Ray actors, one per rank of the layout, and what each loads. The
        optimizer, loss, micro-batching and layout are the run's own sections (``optim``,
        ``loss``, ``micro_batches``, ``layout``), joined with this one into each stage's rank
        config by the run plan (``vlrl.job.run_plan``) and given to ``build``; a recipe's
        ``config.trainer.trainer`` or ``config.trainer.layout``, read or set, is told where the
        setting lives now."""

        cpus_per_worker: Annotated[float, Gt(0)] = 1.0
        """Ray CPUs each rank reserves."""
        gpus_per_worker: Annotated[float, Ge(0)] = 0.0
        """Ray GPUs each rank reserves (0 on CPU machines)."""

        def build(self, stage: TrainerGroup.Stage, *, model_path: str, store_config: Any, layout: Layout) -> TrainerGroup:
            """``stage``: what every rank trains with (a run plan's, ``vlrl.job.run_plan``), whose
            model fields are this section's; ``model_path``: the checkpoint folder every rank loads
            (the policy's, or a checkpoint's ``hf/``); ``layout``: the ranks, already checked
            against the model (``run_plan.resolve``)."""
            differ = [f.name for f in fields(RankModel) if getattr(stage.rank, f.name) != getattr(self, f.name)]
            if differ:
                raise ValueError(f"TrainerGroup.Config.build: the stage's rank config differs from this section in {differ}")
            return TrainerGroup(self, stage, model_path=model_path, store_config=store_config, layout=layout)

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Stage:
        """What every rank of one training stage trains with."""

        rank: Trainer.Config
        """Each rank's ``Trainer`` config: the model fields, the optimizer at the rate AdamW gets,
        the loss, micro-batching and LoRA."""
        steps: int
        """The stage's optimizer steps, over which ``rank.optim.schedule`` runs."""

    def __init__(
        self, config: TrainerGroup.Config, stage: TrainerGroup.Stage, *, model_path: str, store_config: Any, layout: Layout
    ) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.config = config
        self.layout = layout
        encoder = config.resolved_encoder(model_path)  # here: the ranks cannot see a recipe's registration
        bundle = {"CPU": config.cpus_per_worker, **({"GPU": config.gpus_per_worker} if config.gpus_per_worker else {})}
        self._pg = placement_group([bundle] * layout.world_size, strategy="PACK")
        ray.get(self._pg.ready(), timeout=300)
        actor = ray.remote(TrainerWorker)
        self.workers = [
            actor.options(
                num_cpus=config.cpus_per_worker,
                num_gpus=config.gpus_per_worker,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=rank),
            ).remote(rank, layout.world_size)
            for rank in range(layout.world_size)
        ]
        address, port = ray.get(self.workers[0].rendezvous.remote())
        setups = [w.setup.remote(address, port, layout, stage, model_path, store_config, encoder) for w in self.workers]
        self.parameters = ray.get(setups)[0]
        self._adapters_only = stage.rank.lora.enabled

    def step(self, metas: list[SeqMeta], min_version: int | None = None, policy_version: int | None = None) -> dict[str, float]:
        """One optimizer step on ``metas`` (every rank gets the same metadata); rank 0's metrics.
        Tokens sampled by a policy version older than ``min_version`` carry no loss;
        ``policy_version`` (the weights the trainer holds) splits the mismatch guard by lag.
        ``StepInputsLost`` when the ranks could not read the step's payload: every rank has then
        stopped before any gradient, and the step may be run again on other sequences."""
        import ray
        from ray.exceptions import RayTaskError

        refs = [w.step.remote(list(metas), min_version, policy_version) for w in self.workers]
        try:
            return ray.get(refs)[0]
        except RayTaskError as error:
            if not isinstance(error.cause, StepInputsLost):
                raise
            ray.wait(refs, num_returns=len(refs))  # every rank has left the step
            raise error.cause from None

    def push_weights(self, engines: list[Any], version: int, keepers: Sequence[Any] = (), merged: bool = False) -> None:
        """Rank 0's weights (under LoRA the adapters alone, or with ``merged`` every weight with the
        adapters merged in: ``Trainer.push_state``) to every engine as ``version``, through the
        object store.

        ``keepers`` (actors with ``keep(refs, version)``: the engines' ``WeightsKeeper``s) get the
        weights' ref first, so a replica that restarts, now or later, loads them before serving.
        A replica that is down (dead, or restarting under Ray) is skipped with a warning instead
        of failing the push: once back it has these weights from its keeper."""
        import ray
        from ray.exceptions import RayActorError

        refs = [w.weights.remote(merged) for w in self.workers]  # collective: every rank gathers
        ray.get(refs[1:])
        kept = [refs[0]]
        if self._adapters_only and not merged:  # a restarted replica needs the base under the adapters
            self._first_push = self._first_push or refs[0]
            kept = [self._first_push, refs[0]]
        ray.get([keeper.keep.remote(kept, version) for keeper in keepers])  # the refs, not the weights
        updates = [engine.update_weights.remote(refs[0], version) for engine in engines]
        for replica, update in enumerate(updates):
            try:
                ray.get(update)
            except RayActorError as error:
                name = type(error).__name__
                log.warning("push_weights: engine %d is down (%s); version %d skipped there", replica, name, version)

    def save(self, path: str | Path, extra: dict | None = None) -> Path:
        import ray

        return Path(ray.get([w.save.remote(str(path), dict(extra or {})) for w in self.workers])[0])

    def load(self, path: str | Path) -> dict:
        import ray

        return ray.get([w.load.remote(str(path)) for w in self.workers])[0]

    def shutdown(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        try:
            ray.get([w.close.remote() for w in self.workers], timeout=60)
        finally:
            for worker in self.workers:
                ray.kill(worker)
            remove_placement_group(self._pg)

