"""A small config tree for the config tests.

It has every shape ``validate`` and ``--set`` handle: constraints, a literal, optionals, lists,
tuples, a dict, a path, a list of configs, an optional config with a required field, and a union
of two store configs, one with a cross-field ``check()``. String annotations (the
``__future__`` import) are deliberate: real components use them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from vlrl.config import ConfigError, Ge, Gt, Le, Lt, NonEmpty


class DiskStore:
    """A store that spills to local disk."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        """Payloads in files under one directory."""

        root: Path = Path("/tmp/vlrl-store")
        """Directory holding the chunk files."""

        chunk_rows: Annotated[int, Ge(1)] = 512
        """Rows per chunk file.

        Smaller chunks make range reads tighter.
        """


class ClusterStore:
    """A store sharded over a cluster."""

    @dataclass(kw_only=True, slots=True)
    class Config:
        namespace: Annotated[str, NonEmpty()] = "vlrl"
        """Stores with one namespace are one store."""

        shards: Annotated[int, Ge(1)] = 4
        """Shard actors holding the payloads."""

        max_inflight: Annotated[int, Ge(1)] = 8
        """Writes in flight at once; at least one per shard, or shards sit idle."""

        def check(self) -> None:
            if self.max_inflight < self.shards:
                raise ConfigError("max_inflight", self.max_inflight, f"at least shards ({self.shards})")


class AdamW:
    @dataclass(kw_only=True, slots=True)
    class Config:
        lr: Annotated[float, Gt(0)] = 1e-5
        """Peak learning rate."""

        betas: tuple[float, float] = (0.9, 0.95)
        """Decay rates of the first and second moments."""

        schedule: Literal["constant", "cosine"] = "constant"
        """Learning-rate schedule after warmup."""

        warmup_steps: Annotated[int, Ge(0)] | None = None
        """Linear warmup steps; None for no warmup."""

        milestones: list[int] = field(default_factory=list)
        """Steps at which a checkpoint is kept."""

        clip: Annotated[float, Gt(0), Le(10)] = 1.0
        """Gradient-norm clip."""


class Source:
    @dataclass(kw_only=True, slots=True)
    class Config:
        name: Annotated[str, NonEmpty()]
        """Name of the data source in logs."""

        weight: Annotated[float, Gt(0), Lt(1000)] = 1.0
        """Share of each batch, relative to the other sources."""


class Teacher:
    @dataclass(kw_only=True, slots=True)
    class Config:
        model: str
        """Checkpoint of the teacher; no default, so a recipe must name it."""


class Run:
    @dataclass(kw_only=True, slots=True)
    class Config:
        store: DiskStore.Config | ClusterStore.Config = field(default_factory=DiskStore.Config)
        """Where payloads live; swap with store=ClusterStore."""

        optim: AdamW.Config = field(default_factory=AdamW.Config)
        """The optimiser."""

        sources: list[Source.Config] = field(default_factory=list)
        """Data sources of every batch."""

        teacher: Teacher.Config | None = None
        """Teacher for on-policy distillation; None trains on rewards."""

        steps: Annotated[int, Ge(1)] = 100
        """Training steps."""

        eval_every: Annotated[int, Ge(1)] | None = 10
        """Steps between evaluations; None never evaluates."""

        seed: int = 0
        """Seed of task sampling."""

        debug: bool = False
        """Log every request and response."""

        tags: tuple[str, ...] = ()
        """Labels for the run in the tracker."""

        shares: dict[str, float] = field(default_factory=dict)
        """Budget share per env pool."""

        resume: str | None = None
        """Checkpoint to resume from."""

        def check(self) -> None:
            if self.eval_every is not None and self.eval_every > self.steps:
                raise ConfigError("eval_every", self.eval_every, f"at most steps ({self.steps}), or None")
