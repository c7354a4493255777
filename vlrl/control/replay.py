"""Replay of hard tasks: a rare success is kept and joins the task's later groups.

A group whose task the policy solves in one episode of eight has a reward spread, but a later
group of the same task may solve nothing, and the sampler drops it: the policy forgets what it
found by chance. ARPO and DART keep successful trajectories of such tasks and put one back into
the task's later groups. Here, per source (``DataSource.replay``):

1. a trained group whose pass rate is above 0 and at most ``max_pass_rate`` marks its task hard:
   one of its successes is kept (the trained group's own sequences, taken over instead of
   deleted) and the task is played again, before any new task of the source, up to ``revisits``
   times;
2. a revisit group that solved nothing is joined by a copy of the kept success, so it trains
   with a spread; one that solved the task rarely again replaces the kept success with its own
   (the newer policy's); one that solved it more often ends the task's replay;
3. a kept success older than ``max_age`` policy versions is deleted instead of joining. Its
   tokens are exempt from the batch's staleness bound (``SeqMeta.replay_of``) and train under
   truncated importance sampling against the logprobs of the policy that sampled them.

Ownership: the buffer owns the kept sequences' keys (and their image references) until it
deletes them, each deletion counted with its reason; the run's close deletes what is left. A join
writes a copy of the kept sequences' token columns, without their advantages (those are per
group, and a field is written once), under new keys the joining group owns like its own: each
copy takes one more reference to the kept sequences' images, whose pixels are not copied.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ray.exceptions import RayError

from vlrl.config import DataSource, Replay
from vlrl.mm import sequence_refs
from vlrl.records import ADVANTAGES, SeqMeta
from vlrl.store import StoreError
from vlrl.store.sequence_rows import read_sequences

Task = tuple[str, int]
"""A task: (source name, task seed)."""


@dataclass(slots=True)
class ReplayBook:
    """What the buffer did over the run; ``held == kept - sum(deleted.values())``."""

    kept: int = 0
    """Successes taken into the buffer."""
    joined: int = 0
    """Groups a kept success joined."""
    joined_tokens: int = 0
    """Generated tokens the joins added to groups."""
    deleted: Counter[str] = field(default_factory=Counter)
    """Kept successes deleted, by reason (replaced, expired, cap, solved, revisits done, ...)."""

    @property
    def held(self) -> int:
        return self.kept - sum(self.deleted.values())

    def report(self) -> dict[str, Any]:
        return {
            "kept": self.kept,
            "held": self.held,
            "joined": self.joined,
            "joined_tokens": self.joined_tokens,
            **{f"deleted/{reason}": n for reason, n in sorted(self.deleted.items())},
        }


@dataclass(slots=True)
class _HardTask:
    kept: tuple[SeqMeta, ...]
    """The kept success: one trajectory's sequences, in order."""
    revisits_left: int


class ReplayBuffer:
    def __init__(
        self, sources: Mapping[str, DataSource], store: Any, delete: Callable[[Sequence[SeqMeta]], None]
    ) -> None:
        """``delete``: how the owner of keys deletes sequences and drops their image references
        (the driver's, which survives a dead store shard)."""
        self.config: dict[str, Replay] = {name: s.replay for name, s in sources.items() if s.replay is not None}
        self.store = store
        self.delete = delete
        self.book = ReplayBook()
        self._tasks: dict[str, OrderedDict[int, _HardTask]] = {name: OrderedDict() for name in self.config}

    def join(self, task: Task, group_id: str, metas: tuple[SeqMeta, ...], version: int) -> tuple[SeqMeta, ...]:
        """``metas`` (a finished group of ``task``), joined by a copy of the task's kept success
        when none of them succeeded and the kept one is at most ``max_age`` versions old."""
        hard = self._hard(task)
        if hard is None or any(meta.success for meta in metas):
            return metas
        if version - min(meta.policy_version for meta in hard.kept) > self.config[task[0]].max_age:
            self._end(task, "expired")
            return metas
        index = 1 + max(meta.sample_index for meta in metas)
        copies = tuple(
            replace(
                meta, key=f"replay/{group_id}/{meta.key}", group_id=group_id, sample_index=index, replay_of=meta.key,
                branch_of=(),  # a kept branch joins as a trajectory of its own: its root is another group's
                prefix_key="", prefix_tokens=0, prefix_shared=False,  # a copy stores all its rows (_copy)
            )
            for meta in hard.kept
        )
        if not self._copy(hard.kept, copies):
            self._end(task, "lost with a store shard")
            return metas
        self.book.joined += 1
        self.book.joined_tokens += sum(meta.num_response_tokens for meta in copies)
        return (*metas, *copies)

    def trained(self, task: Task, metas: Sequence[SeqMeta]) -> tuple[set[str], bool]:
        """A group of ``task`` was trained: returns the keys of it the buffer now owns (the driver
        must not delete them) and whether to play the task again."""
        config = self.config.get(task[0])
        if config is None:
            return set(), False
        fresh = [meta for meta in metas if not meta.replay_of]
        rate = _pass_rate(fresh)
        hard = self._hard(task)
        if hard is None:
            if not 0 < rate <= config.max_pass_rate:
                return set(), False
            hard = _HardTask(_best_success(fresh), config.revisits)
            self._keep(task, hard)
        elif rate > config.max_pass_rate:
            self._end(task, "solved")
            return set(), False
        elif hard.revisits_left == 0:
            self._end(task, "revisits done")
            return set(), False
        elif rate > 0:
            self._delete(hard.kept, "replaced")
            hard.kept = _best_success(fresh)
            self.book.kept += 1
        hard.revisits_left -= 1
        own = {meta.key for meta in fresh}
        return {meta.key for meta in hard.kept if meta.key in own}, True

    def untrained(self, task: Task, status: str) -> None:
        """A group of ``task`` left without training (``status``: rejected, dropped, failed,
        stale): the task's replay ends, since a revisit is launched only after the last one
        trained."""
        if self._hard(task) is not None:
            self._end(task, f"revisit {status}")

    def close(self) -> None:
        """Delete every kept success: nothing outlives the run."""
        for source, tasks in self._tasks.items():
            for seed in list(tasks):
                self._end((source, seed), "run closed")

    # ------------------------------------------------------------------------------------------

    def _hard(self, task: Task) -> _HardTask | None:
        tasks = self._tasks.get(task[0])
        return None if tasks is None else tasks.get(task[1])

    def _keep(self, task: Task, hard: _HardTask) -> None:
        source, seed = task
        tasks = self._tasks[source]
        tasks[seed] = hard
        self.book.kept += 1
        while len(tasks) > self.config[source].cap:
            self._end((source, next(iter(tasks))), "cap")

    def _end(self, task: Task, reason: str) -> None:
        hard = self._tasks[task[0]].pop(task[1])
        self._delete(hard.kept, reason)

    def _delete(self, metas: tuple[SeqMeta, ...], reason: str) -> None:
        self.delete(metas)
        self.book.deleted[reason] += 1

    def _copy(self, kept: tuple[SeqMeta, ...], copies: tuple[SeqMeta, ...]) -> bool:
        """Write ``copies`` of ``kept``'s token columns, each taking a reference to its images;
        False (nothing written) when a kept key or image reference is gone with a store shard."""
        written: list[SeqMeta] = []
        try:
            if not all(self.store.contains([m.key for m in kept])) or not all(self.store.holds(sequence_refs(kept))):
                return False
            for meta, copy in zip(kept, copies):
                columns = [name for name in self.store.schema(meta.key) if name != ADVANTAGES]
                self.store.put(copy.key, read_sequences(self.store, [meta], columns)[meta.key])
                taken = self.store.share([item.store_key for item in copy.images], copy.key)
                if not all(taken):  # an image went with a shard since the check
                    self.store.release([(item.store_key, copy.key) for item, ok in zip(copy.images, taken) if ok])
                    self.store.delete([copy.key])
                    self.delete(written)
                    return False
                written.append(copy)
            return True
        except (StoreError, RayError):
            self.delete(written)
            return False


def _trajectories(metas: Sequence[SeqMeta]) -> dict[int, list[SeqMeta]]:
    out: dict[int, list[SeqMeta]] = {}
    for meta in metas:
        out.setdefault(meta.sample_index, []).append(meta)
    return out


def _pass_rate(metas: Sequence[SeqMeta]) -> float:
    """Fraction of the trajectories that succeeded (0 for none)."""
    trajectories = _trajectories(metas).values()
    return sum(all(m.success for m in t) for t in trajectories) / max(len(trajectories), 1)


def _best_success(metas: Sequence[SeqMeta]) -> tuple[SeqMeta, ...]:
    """The successful trajectory with the highest reward, then the fewest turns."""
    successes = [t for t in _trajectories(metas).values() if all(m.success for m in t)]
    return tuple(max(successes, key=lambda t: (t[-1].reward, -sum(m.turns for m in t))))
