"""The rollout side of a run, shared by ``vlrl train`` (``TrainJob``), ``vlrl eval`` (``EvalJob``)
and ``vlrl rollout`` (``PolicyRollout``): one set of fields, so a recipe's rollout settings read
the same in all three, and one runtime that starts and ends them (``job.rollout_runtime``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from vlrl.config import ConfigError, DataSource, Ge, NonEmpty
from vlrl.models import ModelFamilyError, TinyModel, family_of
from vlrl.pool.harness_pool import HarnessPool
from vlrl.pool.preflight import check_harness_settings
from vlrl.pool.ray_runtime import RayRuntime
from vlrl.pool.sources import check_sources_have_pools
from vlrl.rollout.client import InferenceClient
from vlrl.rollout.engine import EmbeddedEngine, VLLMEngine
from vlrl.store.ray_store import RayStore
from vlrl.store.transferqueue_store import TransferQueueStore

TINY = "tiny"
"""``model_path`` that builds an untrained tiny model offline (``tiny``: ``models.TinyModel``)."""


@dataclass(kw_only=True, slots=True)
class RolloutSide:
    """Ray, the policy's engine replicas, the payload store and the Harness Pool with its sources."""

    ray: RayRuntime = field(default_factory=RayRuntime)
    """The Ray cluster to run on (a local one by default; ``ray.address`` joins a cluster)."""

    model_path: Annotated[str, NonEmpty()] = TINY
    """Checkpoint folder of the policy (any registered model family: ``vlrl.models``), or 'tiny'
    to build an untrained tiny one offline: the one place the policy's path is set (engines and
    trainer ranks are built with it). A folder is checked for its family before anything starts."""

    tiny: TinyModel = field(default_factory=TinyModel)
    """How the tiny model is built when ``model_path='tiny'`` (``tiny.family`` picks the family)."""

    replicas: Annotated[int, Ge(1)] = 1
    """Engine replicas serving the Agent Loops (behind every loop host's client)."""

    engine: EmbeddedEngine.Config | VLLMEngine.Config = field(
        default_factory=lambda: EmbeddedEngine.Config(cpus=0)
    )
    """Engine replica settings (each replica serves ``model_path``): the embedded Hugging Face
    engine (CPU or GPU), or vLLM on GPU nodes (``examples/train_click_vllm.py``)."""

    client: InferenceClient.Config = field(default_factory=InferenceClient.Config)
    """Retries and image shipping of each loop host's inference client."""

    store: RayStore.Config | TransferQueueStore.Config = field(default_factory=RayStore.Config)
    """Where trajectory payloads go (in training, every trainer rank reads from it too)."""

    pool: HarnessPool.Config = field(default_factory=HarnessPool.Config)
    """Host budget and limits of the Harness Pool."""

    sources: list[DataSource] = field(default_factory=lambda: [DataSource()])
    """Data sources; each needs an env pool (a budget share) for its codebase."""

    def check(self) -> None:
        if self.model_path != TINY:
            try:
                family_of(self.model_path)
            except ModelFamilyError as error:
                raise ConfigError(
                    "model_path", self.model_path, "a checkpoint folder of a supported model family", hint=str(error)
                ) from None
        check_sources_have_pools(self.sources, self.pool.budget.shares)

    def preflight(self) -> None:
        """What is checked after validation and before Ray starts: every source's harness builds
        with its settings (``pool.preflight``), so a refused keyword fails here, not on the hosts."""
        check_harness_settings(self.sources)
