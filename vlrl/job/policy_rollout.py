"""``vlrl rollout`` with a policy: groups of Agent Loops per data source on the Harness Pool,
served by embedded engine replicas, their payloads in the distributed store, all of it started
and ended as the training job's is (``RolloutRuntime``).

It is the rollout half of a training step: every trajectory's payload is written once to the
store and only ``SeqMeta`` comes back here; the summary reports what each source achieved and
what crossed the wire. Every key it wrote (sequences and images) is deleted at the end, as a
training step deletes what it consumed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from typing import Annotated, Any

from vlrl.config import Ge
from vlrl.job.rollout_runtime import RolloutRuntime
from vlrl.mm import delete_sequences
from vlrl.pool.harness_pool import HarnessPool
from vlrl.pool.tenant import lost_writers
from vlrl.records import SeqMeta
from vlrl.rollout.agent_loop import AgentLoop
from vlrl.rollout.rollout_side import RolloutSide


class PolicyRollout:
    @dataclass(kw_only=True, slots=True)
    class Config(RolloutSide):
        """Policy-driven episodes of every data source, payloads to the store."""

        groups_per_source: Annotated[int, Ge(1)] = 2
        """Groups (tasks) per source; each group runs the source's group_size trajectories."""

        seed: Annotated[int, Ge(0)] = 0
        """Task seed of the first group; group g uses seed + g."""

        def build(self) -> PolicyRollout:
            return PolicyRollout(self)

    def __init__(self, config: PolicyRollout.Config) -> None:
        self.config = config

    def run(self) -> dict[str, Any]:
        import ray

        config = self.config
        config.preflight()
        with RolloutRuntime(config) as runtime:
            started = time.perf_counter()
            outcomes, owners = self._play(runtime.pool)
            wall_s = time.perf_counter() - started
            engine_stats = ray.get([engine.stats.remote() for engine in runtime.engines])
            summary = _summary(config, outcomes, owners, engine_stats, runtime.pool, wall_s)
            delete_sequences(runtime.store, [meta for o in outcomes if o.status == "ok" for meta in o.value])
            runtime.store.take_back(lost_writers(outcomes))  # what runs wrote before their loop host died
            summary["store_keys_left"] = runtime.keys_left()
        for name, figures in summary["sources"].items():
            print(
                f"{name:<16} trajectories {figures['trajectories']:>4}  success {figures['success_rate']:.2f}  "
                f"mean reward {figures['mean_reward']:+.2f}  failed {figures['failed']}"
            )
        print(json.dumps(summary))
        return summary

    def _play(self, pool: HarnessPool) -> tuple[list[Any], list[str]]:
        config = self.config
        jobs, owners = [], []
        for source in config.sources:
            source = replace(source, branching=None)  # independent episodes: trees are a training-time grouping
            for group in range(config.groups_per_source):
                group_id = f"{source.name}/{config.seed + group}"
                for index in range(source.group_size):
                    loop = AgentLoop(source, seed=config.seed + group, group_id=group_id, sample_index=index)
                    jobs.append((loop, {"codebase": source.codebase, "env_settings": source.env.as_kwargs()}))
                    owners.append(source.name)
        return asyncio.run(pool.run_many(jobs)), owners



def _summary(
    config: PolicyRollout.Config,
    outcomes: list[Any],
    owners: list[str],
    engine_stats: list[dict[str, float]],
    pool: HarnessPool,
    wall_s: float,
) -> dict[str, Any]:
    per_source: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    images: set[str] = set()
    sequences = 0
    for name, outcome in zip(owners, outcomes):
        figures = per_source[name]
        figures["trajectories"] += 1
        if outcome.status != "ok":
            figures["failed"] += 1
            continue
        metas: list[SeqMeta] = outcome.value
        sequences += len(metas)
        figures["success"] += metas[0].success
        figures["reward"] += metas[0].reward
        figures["tokens"] += sum(m.num_tokens for m in metas)
        images.update(m.content_hash for meta in metas for m in meta.images)
    done = {name: f["trajectories"] - f["failed"] for name, f in per_source.items()}
    return {
        "sources": {
            name: {
                "trajectories": int(f["trajectories"]),
                "failed": int(f["failed"]),
                "success_rate": f["success"] / max(1, done[name]),
                "mean_reward": f["reward"] / max(1, done[name]),
                "mean_tokens": f["tokens"] / max(1, done[name]),
            }
            for name, f in per_source.items()
        },
        "sequences": sequences,
        "unique_images": len(images),
        "image_bytes_received": sum(s["image_bytes_received"] for s in engine_stats),
        "prefill_tokens": sum(s["prefill_tokens"] for s in engine_stats),
        "reused_prefix_tokens": sum(s["reused_prefix_tokens"] for s in engine_stats),
        "pool_sizes": pool.sizes(),
        "host_nodes": pool.placement(),
        "book": {k: v for k, v in asdict(pool.book).items() if k != "errors"},
        "errors": pool.book.errors[:10],
        "wall_s": round(wall_s, 2),
        "model": config.model_path,
    }
