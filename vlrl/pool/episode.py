"""A tenant that plays one episode with a scripted policy: the harness's oracle or random clicks.

It is the model-free Agent Loop: the pool benchmark's workload, and the source of oracle
demonstrations for a supervised warm start.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal

from vlrl.harness import Action
from vlrl.pool.tenant import TenantContext


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    seed: int
    task: str | None
    reward: float
    steps: int
    success: bool
    actions: tuple[Action, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class ScriptedEpisode:
    seed: int
    task: str | None = None
    policy: Literal["oracle", "random"] = "oracle"
    max_steps: int = 20

    async def run(self, ctx: TenantContext) -> EpisodeResult:
        env = await ctx.open_env()
        options: dict[str, Any] | None = {"task": self.task} if self.task else None
        obs, info = await env.reset(seed=self.seed, options=options)
        rng = random.Random(self.seed)
        total, actions = 0.0, []
        for _ in range(self.max_steps):
            action = await env.oracle() if self.policy == "oracle" else None
            if action is None:
                action = Action.click(rng.randrange(obs.width), rng.randrange(obs.height))
            actions.append(action)
            obs, reward, terminated, truncated, info = await env.step(action)
            total += reward
            if terminated or truncated:
                break
        return EpisodeResult(
            self.seed, info.get("task", self.task), total, len(actions), bool(info.get("success")), tuple(actions)
        )
