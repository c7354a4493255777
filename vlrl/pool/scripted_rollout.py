"""``vlrl rollout`` without a model: every data source's episodes played by a scripted policy
(the harness oracle, or random clicks) on the Harness Pool. It checks a deployment (codebases
import, pools start, budget shares hold, harnesses reward what they should) before any GPU time
is spent, and measures the success of the oracle or of chance on each source."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, Literal

from vlrl.config import ConfigError, DataSource, Ge
from vlrl.pool.episode import ScriptedEpisode
from vlrl.pool.harness_pool import HarnessPool
from vlrl.pool.preflight import check_harness_settings
from vlrl.pool.ray_runtime import RayRuntime
from vlrl.pool.sources import check_sources_have_pools


class ScriptedRollout:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Scripted episodes of every data source on the Harness Pool."""

        ray: RayRuntime = field(default_factory=RayRuntime)
        """The Ray cluster to run on."""

        pool: HarnessPool.Config = field(default_factory=HarnessPool.Config)
        """Host budget and limits of the Harness Pool."""

        sources: list[DataSource] = field(default_factory=lambda: [DataSource()])
        """Data sources; each needs an env pool (a budget share) for its codebase."""

        episodes_per_source: Annotated[int, Ge(1)] = 16
        """Episodes played for each source."""

        policy: Literal["oracle", "random"] = "oracle"
        """Scripted policy: the harness oracle, or uniformly random clicks (chance level)."""

        seed: Annotated[int, Ge(0)] = 0
        """First episode seed; episode i of a source uses seed + i."""

        def check(self) -> None:
            names = [source.name for source in self.sources]
            if len(set(names)) != len(names):
                raise ConfigError("sources", names, "unique source names")
            check_sources_have_pools(self.sources, self.pool.budget.shares)

        def build(self) -> ScriptedRollout:
            return ScriptedRollout(self)

    def __init__(self, config: ScriptedRollout.Config) -> None:
        self.config = config

    def run(self) -> dict[str, Any]:
        import ray

        config = self.config
        check_harness_settings(config.sources)
        started_ray = config.ray.ensure()
        pool = config.pool.build()
        try:
            jobs, owners = [], []
            for source in config.sources:
                for i in range(config.episodes_per_source):
                    episode = ScriptedEpisode(
                        seed=config.seed + i, policy=config.policy, max_steps=source.agent.max_turns
                    )
                    jobs.append((episode, {"codebase": source.codebase, "env_settings": source.env.as_kwargs()}))
                    owners.append(source.name)
            outcomes = asyncio.run(pool.run_many(jobs))
            sizes, book = pool.sizes(), pool.book
        finally:
            pool.shutdown()
            if started_ray:
                ray.shutdown()
        per_source: dict[str, dict[str, float]] = defaultdict(lambda: {"episodes": 0, "failed": 0, "success": 0, "steps": 0})
        for name, outcome in zip(owners, outcomes):
            figures = per_source[name]
            figures["episodes"] += 1
            if outcome.status != "ok":
                figures["failed"] += 1
                continue
            figures["success"] += outcome.value.success
            figures["steps"] += outcome.value.steps
        summary = {
            "policy": config.policy,
            "pool_sizes": sizes,
            "sources": {
                name: {
                    "episodes": f["episodes"],
                    "failed": f["failed"],
                    "success_rate": f["success"] / f["episodes"],
                    "mean_steps": f["steps"] / max(1, f["episodes"] - f["failed"]),
                }
                for name, f in per_source.items()
            },
            "book": {k: v for k, v in asdict(book).items() if k != "errors"},
            "errors": book.errors[:10],
        }
        for name, figures in summary["sources"].items():
            print(f"{name:<16} episodes {figures['episodes']:>4}  success {figures['success_rate']:.2f}  "
                  f"failed {figures['failed']}  mean steps {figures['mean_steps']:.1f}")
        print(json.dumps(summary))
        return summary

