"""The driver's books: how many groups were generated, accepted, left (with the reason of each)
and trained, and where every group still held is, counted as each moves rather than derived from
each other, so that ``drift`` can find the counter that went wrong."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


OUTCOMES = ("rejected", "dropped", "failed", "stale")
"""How a group leaves untrained; each leave is counted with its reason."""

OPEN = ("rolling out", "grading", "deciding")
"""Where a group not decided yet is: ``pending`` counts these."""

HELD = ("buffered", "training", "deleted at close")
"""Where an accepted group not trained yet is (deleted at close: the run ended first; its task is
still open in ``TaskSeeds``, so a resumed run plays it again)."""


@dataclass(slots=True)
class DriverBook:
    """Group counts of the whole run, why groups left, and where every group still held is."""

    generated: int = 0
    accepted: int = 0
    rejected: int = 0
    dropped: int = 0
    failed: int = 0
    stale: int = 0
    graded: int = 0
    trained: int = 0
    stale_tokens: int = 0
    """Generated tokens of trained groups left out of the loss: sampled by a policy version
    older than their batch's ``min_version``."""
    forks: int = 0
    """Branches of branching sources whose harness instance was forked from a sibling's."""
    replays: int = 0
    """Replays of a root episode to a branch point (one per point, more where the harness does not fork)."""
    branch_failures: Counter[str] = field(default_factory=Counter)
    """Branches that could not start (a replay that diverged, a fork that failed), by reason;
    they are left out of their group, which goes on."""
    reasons: Counter[str] = field(default_factory=Counter)
    """``"<outcome>: <kind>"`` -> groups that left so; per outcome they add up to its count."""
    incidents: Counter[str] = field(default_factory=Counter)
    """Store troubles that ended no group (a delete or release that failed on a dead shard)."""
    where: dict[str, str] = field(default_factory=dict)
    """Group id -> where it is, for every group generated and neither left nor trained (``OPEN``
    or ``HELD``); written at each move, independently of the counters."""

    @property
    def pending(self) -> int:
        """Groups open now (rolling out, being graded or decided), counted from ``where``."""
        return sum(1 for place in self.where.values() if place in OPEN)

    def held(self) -> int:
        """Accepted groups not trained: buffered, with the trainer, or deleted at close."""
        return sum(1 for place in self.where.values() if place in HELD)

    def drift(self) -> list[str]:
        """Where the books disagree with themselves, each naming its counter; [] when exact."""
        problems = []
        for outcome in OUTCOMES:
            count = getattr(self, outcome)
            told = sum(n for reason, n in self.reasons.items() if reason.startswith(f"{outcome}: "))
            if count != told:
                problems.append(f"{outcome}: counted {count}, but its reasons add up to {told}")
        left = self.accepted + sum(getattr(self, outcome) for outcome in OUTCOMES)
        if self.generated != left + self.pending:
            problems.append(
                f"generated: counted {self.generated}, but accepted + rejected + dropped + failed + stale"
                f" = {left} and {self.pending} are open"
            )
        if self.accepted != self.trained + self.held():
            problems.append(
                f"accepted: counted {self.accepted}, but {self.trained} were trained and {self.held()} are held"
            )
        return problems

    def report(self) -> dict[str, Any]:
        return {
            "generated": self.generated,
            "graded": self.graded,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "dropped": self.dropped,
            "failed": self.failed,
            "stale": self.stale,
            "pending": self.pending,
            "trained": self.trained,
            "stale_tokens": self.stale_tokens,
            "forks": self.forks,
            "replays": self.replays,
            "branch_failures": dict(self.branch_failures),
            "reasons": dict(self.reasons),
            "incidents": dict(self.incidents),
        }
