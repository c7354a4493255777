"""Which task seeds a run's groups use, and which of them no training step has taken yet.

Each source's groups take seeds in order. A checkpoint taken while groups are still rolling out,
being graded or buffered has not trained them; a run resumed from it replays those seeds first
(``replay``), then goes on from the first seed never used, so each task group trains once.

A hard task may be played again (``revisit``, by ``control.replay``): its seed is handed out once
more, before new ones, under a group id of its own (``source/seed~k`` for the k-th revisit).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence


class TaskSeeds:
    def __init__(
        self, sources: Iterable[str], seed: int | Mapping[str, int] = 0, replay: Mapping[str, Sequence[int]] | None = None
    ) -> None:
        """``seed``: the first seed of every source, or of each by name. ``replay``: seeds of each
        source to hand out first (a checkpoint's ``open_seeds``)."""
        names = list(sources)
        first = seed if isinstance(seed, Mapping) else dict.fromkeys(names, seed)
        self._next = {name: int(first.get(name, 0)) for name in names}
        self._replay = {name: deque(sorted((replay or {}).get(name, ()))) for name in names}
        self._revisit: dict[str, deque[tuple[int, int]]] = {name: deque() for name in names}
        """Per source, the (seed, k) of revisits to hand out."""
        self._revisits: Counter[tuple[str, int]] = Counter()
        self._open: dict[str, tuple[str, int]] = {}
        """Groups started and neither trained nor left, by group id: (source, seed)."""

    def start(self, source: str) -> tuple[int, str]:
        """The seed of ``source``'s next group and its group id; the group is open until ``close``."""
        replay, revisit = self._replay[source], self._revisit[source]
        if replay:
            seed = replay.popleft()
            group_id = f"{source}/{seed}"
        elif revisit:
            seed, k = revisit.popleft()
            group_id = f"{source}/{seed}~{k}"
        else:
            seed = self._next[source]
            self._next[source] += 1
            group_id = f"{source}/{seed}"
        self._open[group_id] = (source, seed)
        return seed, group_id

    def revisit(self, source: str, seed: int) -> None:
        """Play ``seed`` once more, before any new seed of ``source``."""
        self._revisits[source, seed] += 1
        self._revisit[source].append((seed, self._revisits[source, seed]))

    def task(self, group_id: str) -> tuple[str, int]:
        """``(source, seed)`` of an open group."""
        return self._open[group_id]

    def close(self, group_id: str) -> None:
        """The group was trained, or left untrained for good (rejected, dropped, failed, stale)."""
        self._open.pop(group_id, None)

    @property
    def next_seeds(self) -> dict[str, int]:
        """The first seed of each source not started yet."""
        return dict(self._next)

    def open_seeds(self) -> dict[str, list[int]]:
        """Seeds of the groups started and not closed, and of those queued for replay or a
        revisit: what a checkpoint taken now has not trained."""
        out = {name: [*queue, *(seed for seed, _ in self._revisit[name])] for name, queue in self._replay.items()}
        for source, seed in self._open.values():
            out[source].append(seed)
        return {name: sorted(seeds) for name, seeds in out.items() if seeds}
