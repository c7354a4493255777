"""A model-free trajectory tenant for driver tests: it plays a light-harness episode on its
leased env instance and stores a small payload plus its screenshot, as an Agent Loop would."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlrl.config import DataSource
from vlrl.harness import Action
from vlrl.mm import store_image
from vlrl.pool.tenant import TenantContext
from vlrl.records import SeqMeta


@dataclass(frozen=True)
class StoreSetup:
    """Loop-host setup: every tenant of the host shares this store client."""

    store: Any

    def __call__(self) -> dict[str, Any]:
        return {"store": self.store}


@dataclass(frozen=True)
class StoredTrajectory:
    """Succeeds on even sample indices of odd task seeds, so groups of even seeds all fail
    (unless ``always_mixed``: then every group has successes and failures)."""

    source: DataSource
    seed: int
    group_id: str
    index: int
    version: int = 0
    always_mixed: bool = False
    first_turn_version: int | None = None
    """When set, the episode crossed a weight update: its first turn (two tokens) was sampled by
    this version, the rest by ``version``."""

    def screenshot(self, observed: np.ndarray) -> np.ndarray:
        return observed

    async def run(self, ctx: TenantContext) -> list[SeqMeta]:
        store = ctx.shared["store"]
        env = await ctx.open_env()
        obs, _ = await env.reset(seed=self.seed)
        terminated = truncated = False
        while not (terminated or truncated):
            obs, _, terminated, truncated, _ = await env.step(Action.click(1, 1))
        success = (self.always_mixed or self.seed % 2 == 1) and self.index % 2 == 0
        n, prompt = 12 + self.index, 8
        key = f"seq/{self.group_id}/{self.index}/{ctx.tenant_id}"
        image = await ctx.to_thread(functools.partial(store_image, holder=key), store, self.screenshot(obs.screenshot))
        store.put(
            key,
            {
                "token_ids": np.arange(n, dtype=np.int32),
                "logprobs": np.where(np.arange(n) >= prompt, -0.5, 0.0).astype(np.float32),
                "loss_mask": np.arange(n) >= prompt,
            },
        )
        turns: dict[str, Any] = dict(turns=1, context_lengths=(prompt,), policy_version=self.version)
        if self.first_turn_version is not None:
            turns = dict(
                turns=2, context_lengths=(prompt, prompt + 2), policy_version=min(self.first_turn_version, self.version),
                turn_versions=(self.first_turn_version, self.version), turn_tokens=(2, n - prompt - 2),
            )  # fmt: skip
        return [
            SeqMeta(
                key=key, group_id=self.group_id, source=self.source.name, sample_index=self.index,
                reward=float(success), success=success, finish="done", num_tokens=n,
                num_response_tokens=n - prompt, images=(image,), image_offsets=((1, 0),), **turns,
            )
        ]


@dataclass(frozen=True)
class SameScreenTrajectory(StoredTrajectory):
    """As ``StoredTrajectory`` with every trajectory of every group storing one screenshot: its
    content-addressed key is shared by all of them, as a static screen is in a real run."""

    def screenshot(self, observed: np.ndarray) -> np.ndarray:
        return np.full_like(observed, 7)
