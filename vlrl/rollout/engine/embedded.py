"""``EmbeddedEngine``: one Hugging Face Qwen2-VL replica as a Ray actor, speaking ``protocol``.

An async actor with an explicit ``max_concurrency``: every waiting ``generate`` is a coroutine
on its event loop, the model runs on the core's compute thread, so requests keep arriving (and
joining the next batch) while a batch decodes.

Ray restarts a crashed replica in place (``max_restarts``). The restarted process starts with
empty caches (references to images it never saw are answered with ``CacheMiss`` and the client
resends) but with the current weights, which its constructor loads from the replica's
``WeightsKeeper`` (``weights_keeper``) before it serves anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
import ray
import torch

from encoders.spec import EncoderSpec, ResolvedEncoder
from vlrl.config import ConfigError, Ge, Gt, NonEmpty
from vlrl.rollout.engine.core import EngineCore
from vlrl.rollout.engine.weights_keeper import keep_weights_of, latest_weights, start_keeper
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, ScoreResult


class EmbeddedEngine:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """An in-process Hugging Face engine replica (no vLLM): for CPU runs, tests and small models."""

        max_batch: Annotated[int, Ge(1)] = 8
        """Requests decoded together in one batch."""

        batch_wait_ms: Annotated[float, Ge(0)] = 5.0
        """How long a non-full batch waits for more requests before it starts."""

        image_cache_mb: Annotated[float, Gt(0)] = 512.0
        """Bound on the processed images kept by content hash (MiB of ``pixel_values``)."""

        tile_cache_mb: Annotated[float, Gt(0)] = 256.0
        """Bound on the tiles of shipped screens kept by hash (MiB of raw pixels): a later screen
        arrives as its changed tiles and is assembled against them (``mm.tile_wire``)."""

        max_cached_trajectories: Annotated[int, Ge(0)] = 256
        """Trajectories whose KV prefix is kept for their next turn (least recently used dropped; 0: no reuse)."""

        dtype: Literal["float32", "bfloat16", "float16"] = "float32"
        """Weights and activations dtype."""

        device: Annotated[str, NonEmpty()] = "cpu"
        """Torch device of the model ('cpu', 'cuda', 'cuda:1')."""

        torch_threads: Annotated[int, Ge(1)] | None = None
        """CPU threads torch uses in the actor (None: torch's default)."""

        preprocess_threads: Annotated[int, Ge(1)] = 2
        """Threads running the image processor on newly sent pixels."""

        max_concurrency: Annotated[int, Ge(1)] = 512
        """Concurrent actor calls: waiting ``generate`` calls plus control calls."""

        cpus: Annotated[float, Ge(0)] = 1.0
        """Ray logical CPUs the actor reserves."""

        gpus: Annotated[float, Ge(0)] = 0.0
        """Ray GPUs the actor reserves (1 with device 'cuda')."""

        max_restarts: Annotated[int, Ge(0)] = 3
        """Times Ray restarts a crashed replica in place (0: a crash ends it). It comes back with
        the latest pushed weights and version but empty caches, so clients see cache misses and resend."""

        encoder: EncoderSpec | None = None
        """A plug-in vision encoder in place of the checkpoint's tower (None: the tower); the
        trainer's must be the same (``Trainer.Config.encoder``), or rollouts see other embeddings."""

        record_routing: bool = False
        """Report the experts every mixture-of-experts layer sent each token to, prompt tokens
        included (``records.ROUTED_EXPERTS``, ``layers x top_k`` bytes a token), for the trainer
        to replay; ``vlrl train`` turns it on with ``loss.routing_replay='rollout'``. A model
        without experts fails to load with it."""

        def check(self) -> None:
            if self.max_concurrency <= self.max_batch:
                raise ConfigError(
                    "max_concurrency",
                    self.max_concurrency,
                    f"more than max_batch ({self.max_batch}), to leave room for control calls",
                )

        def resolved_encoder(self, model_path: str) -> ResolvedEncoder | None:
            """``encoder`` resolved and checked against ``model_path``'s patch rule and width, in
            this process (where a recipe registered it); None for the checkpoint's tower."""
            return None if self.encoder is None else self.encoder.resolve_for(model_path)

        def build(self, *, model_path: str) -> Any:
            """Start the actor serving the checkpoint folder ``model_path`` (model and processor, as
            ``save_pretrained`` writes them: the job's policy); returns its Ray handle (call
            ``.generate.remote(request)`` and so on). A plug-in encoder is resolved and checked
            first, so a bad one fails before any actor."""
            encoder = self.resolved_encoder(model_path)
            if not ray.is_initialized():
                raise RuntimeError("EmbeddedEngine needs a running Ray: call ray.init() first")
            keeper_name, keeper = start_keeper()
            engine = (
                ray.remote(EmbeddedEngine)
                .options(
                    max_concurrency=self.max_concurrency,
                    num_cpus=self.cpus,
                    num_gpus=self.gpus,
                    max_restarts=self.max_restarts,
                )
                .remote(self, model_path, encoder, keeper_name)
            )
            return keep_weights_of(engine, keeper)

    # Every method but __init__ is async, so Ray runs it on the event loop: the one thread that owns the
    # core's queues and caches.

    def __init__(
        self,
        config: EmbeddedEngine.Config,
        model_path: str,
        encoder: ResolvedEncoder | None = None,
        keeper_name: str | None = None,
    ) -> None:
        """``keeper_name``: this replica's ``WeightsKeeper``; a restarted replica loads what it holds."""
        self._core = EngineCore(config, model_path, encoder)
        self._restored: int | None = None
        if keeper_name is not None:
            weights, version = latest_weights(keeper_name)
            if weights is not None:
                self._core.restore(weights, version)
                self._restored = version

    async def generate(self, request: GenerateRequest) -> GenerateResult | CacheMiss:
        return await self._core.generate(request)

    async def score(self, request: GenerateRequest) -> ScoreResult | CacheMiss:
        return await self._core.score(request)

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor | np.ndarray], version: int) -> None:
        if version == self._restored:  # a push that reached the keeper before this restart read it
            return
        await self._core.update_weights(state_dict, version)

    async def load(self) -> int:
        return self._core.load()

    async def policy_version(self) -> int:
        return self._core.policy_version()

    async def forget(self, trajectory_id: str) -> None:
        self._core.forget(trajectory_id)

    async def stats(self) -> dict[str, float]:
        return self._core.stats()
