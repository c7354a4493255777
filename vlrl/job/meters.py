"""What a training step reports about its rollouts, read on metadata only.

``RolloutMeter`` stands between the driver and the Harness Pool (the driver calls only
``run``): it counts every finished training episode, accepted by the sampler or not, so the pass
rate it reports is that of all rollouts, not only of the groups that made it into a batch.
``CostMeter`` reads what the rollouts cost from the engines' and the store's own counters.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

from vlrl.control.driver_book import DriverBook
from vlrl.pool.harness_pool import HarnessPool
from vlrl.pool.tenant import Tenant, TenantOutcome
from vlrl.records import Batch, SeqMeta, TreeRollout


class RolloutMeter:
    """A ``HarnessPool`` front that tallies finished episodes by source between two ``take`` calls."""

    def __init__(self, pool: HarnessPool, sources: list[str]) -> None:
        self.pool = pool
        self.sources = list(sources)
        """Every source gets its figures each step, zero when none of its episodes finished then."""
        self._since = time.perf_counter()
        self._tally: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    @property
    def book(self) -> Any:
        return self.pool.book

    async def run(self, tenant: Tenant, **kwargs: Any) -> TenantOutcome:
        outcome = await self.pool.run(tenant, **kwargs)
        if outcome.status == "ok" and outcome.value:
            value = outcome.value
            for trajectory in _trajectories(value.metas if isinstance(value, TreeRollout) else value):
                self._record(trajectory)
        else:
            source = getattr(getattr(tenant, "source", None), "name", "?")
            self._tally[source]["failed"] += 1
        return outcome

    def _record(self, metas: list[SeqMeta]) -> None:
        t = self._tally[metas[0].source]
        t["episodes"] += 1
        t["success"] += metas[0].success
        t["reward"] += metas[0].reward
        t["turns"] += sum(m.turns for m in metas)
        t["sequences"] += len(metas)  # more than one: the context was rewritten (history window, agent memory)
        t["response_tokens"] += sum(m.num_response_tokens for m in metas)

    def take(self) -> dict[str, float]:
        """Figures of the episodes finished since the last call: overall and per source."""
        now = time.perf_counter()
        elapsed, self._since = now - self._since, now
        tally, self._tally = self._tally, defaultdict(lambda: defaultdict(float))
        total: dict[str, float] = defaultdict(float)
        out: dict[str, float] = {}
        for name in self.sources:
            tally.setdefault(name, defaultdict(float))  # no episode of it in this window: it reports 0
        for name, t in sorted(tally.items()):
            for key, value in t.items():
                total[key] += value
            out[f"rollout/{name}/episodes"] = t["episodes"]
            if t["episodes"]:
                out[f"rollout/{name}/pass_rate"] = t["success"] / t["episodes"]
                for key in ("reward", "turns", "sequences", "response_tokens"):
                    out[f"rollout/{name}/{key}"] = t[key] / t["episodes"]
        out["rollout/episodes"] = total["episodes"]
        out["rollout/env_steps"] = total["turns"]  # a branch's own turns only: its prefix was replayed
        out["rollout/failed"] = total["failed"]
        out["rollout/tokens_per_s"] = total["response_tokens"] / max(elapsed, 1e-9)
        if total["episodes"]:  # (with prefetch, a step may find every episode already counted)
            n = total["episodes"]
            for key in ("reward", "turns", "sequences", "response_tokens"):
                out[f"rollout/{key}"] = total[key] / n
            out["rollout/pass_rate"] = total["success"] / n
        return out


class CostMeter:
    """What the rollouts cost where it was paid, between two ``take`` calls: the engine replicas'
    own counters (prompt tokens computed, prompt tokens served from a cached KV prefix, image
    bytes received) and the store's payload bytes written (``StoreStats.bytes_put``)."""

    ENGINE = ("prefill_tokens", "reused_prefix_tokens", "image_bytes_received")

    def __init__(self, engines: list[Any], store: Any) -> None:
        self._engines, self._store = engines, store
        self._last: dict[tuple[int, str], float] = {}
        self._put = store.stats().bytes_put

    async def take(self) -> dict[str, float]:
        """``engine/...`` summed over the replicas that answer (a restarted one counts from 0),
        ``engine/prefix_hit_rate`` (reused / (prefill + reused) prompt tokens) and
        ``store/bytes_put``, since the last call."""
        from ray.exceptions import RayError

        totals: Counter[str] = Counter()
        for replica, engine in enumerate(self._engines):
            try:
                stats = await engine.stats.remote()
            except RayError:
                continue
            for name in self.ENGINE:
                now, before = float(stats.get(name, 0.0)), self._last.get((replica, name), 0.0)
                totals[name] += now - before if now >= before else now
                self._last[(replica, name)] = now
        put, self._put = self._put, self._store.stats().bytes_put
        prompt = totals["prefill_tokens"] + totals["reused_prefix_tokens"]
        return {
            **{f"engine/{name}": totals[name] for name in self.ENGINE},
            "engine/prefix_hit_rate": totals["reused_prefix_tokens"] / prompt if prompt else 0.0,
            "store/bytes_put": self._put - put,
        }


def batch_metrics(batch: Batch, version: int) -> dict[str, float]:
    """The trained batch: groups and sequences per source (the batch shares), reward, staleness."""
    sequences = batch.sequences
    out: dict[str, float] = {
        "batch/groups": len(batch.groups),
        "batch/sequences": len(sequences),
        "batch/branches": sum(bool(m.branch_of) for m in sequences),
        "batch/tokens": sum(m.num_tokens for m in sequences),
        "batch/reward": sum(m.reward for m in sequences) / max(len(sequences), 1),
        "batch/staleness": sum(version - g.policy_version for g in batch.groups) / max(len(batch.groups), 1),
        "batch/spanning_sequences": sum(len(set(m.turn_versions)) > 1 for m in sequences),
    }
    for lag, tokens in sorted(staleness_histogram(batch, version).items()):
        out[f"batch/tokens_lag{lag}"] = tokens
    for name, groups in batch.per_source().items():
        out[f"batch/{name}/groups"] = groups
    grouped, turns = (sum(g.decision.step_turns[k] for g in batch.groups) for k in (0, 1))
    if turns:
        out["batch/step_grouped_turns"] = grouped / turns
    return out


def _trajectories(metas: tuple[SeqMeta, ...] | list[SeqMeta]) -> list[list[SeqMeta]]:
    """A run's sequences by trajectory (one, unless a branching source's tree returned several):
    a trajectory's sequences are consecutive and share its sample index. A branch's turns are
    its own, so a tree's episodes add up to the turns it played."""
    out: list[list[SeqMeta]] = []
    for meta in metas:
        if out and out[-1][0].sample_index == meta.sample_index:
            out[-1].append(meta)
        else:
            out.append([meta])
    return out


def book_metrics(book: DriverBook) -> dict[str, float]:
    """The driver's group books since the run started (the counts; the reasons stay in the report),
    and the branches that could not start, in all."""
    out = {f"groups/{k}": v for k, v in book.report().items() if not isinstance(v, dict)}
    out["groups/branch_failed"] = sum(book.branch_failures.values())
    return out


def staleness_histogram(batch: Batch, version: int) -> dict[int, int]:
    """Generated tokens of ``batch`` by how many versions their sampling policy lags ``version``."""
    lags: Counter[int] = Counter()
    for meta in batch.sequences:
        for sampled, tokens in meta.version_tokens():
            lags[version - sampled] += tokens
    return dict(lags)
