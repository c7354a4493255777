"""Bringing a harness instance to a point of a recorded episode: fork or replay.

Branching rollouts restart an episode from one of its turns. Two ways get an instance there:

- **fork**: a harness that can copy its state overrides ``Harness.fork`` (the Pillow desktop
  copies its widget objects); the copy is in the same state, screen for screen, and goes on
  independently of the original.
- **replay**: every deterministic harness gets it for free. The episode is reset with the
  recorded seed and options and the recorded moves are sent again; after each, the screen's
  state (``state_of``: the observation's ``state_key``, else its screenshot's content hash) is
  compared with the recorded one. A mismatch raises ``ReplayDivergence`` naming the turn, so a
  harness that is not as deterministic as it claims is caught at the first screen that differs,
  never trained on silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vlrl.errors import PicklesWhole
from vlrl.harness.actions import Action
from vlrl.harness.base import Harness
from vlrl.harness.errors import ActionError, HarnessError
from vlrl.harness.observation import Observation
from vlrl.mm.content_hash import content_hash


class ReplayDivergence(PicklesWhole, HarnessError):
    """A replayed episode reached a screen other than the recorded one."""

    def __init__(self, turn: int, expected: str, got: str, detail: str = "") -> None:
        self.turn, self.expected, self.got = turn, expected, got
        why = detail or f"its state is {got[:12]}, the recorded one {expected[:12]}"
        super().__init__(f"replay diverged at turn {turn}: {why} (the harness is not deterministic there)")


@dataclass(frozen=True, slots=True)
class EpisodeRecord:
    """What replaying an episode needs: how it was reset, what each turn sent, what each turn saw."""

    seed: int | None
    options: dict[str, Any] | None = None
    moves: tuple[Action | None, ...] = ()
    """What each turn sent the harness, in order (None: nothing, a reply that did not parse)."""
    states: tuple[str, ...] = field(default=())
    """``state_of`` the screen each turn was made on, in order; one more than ``moves`` when the
    screen after the last move is recorded too."""

    def __post_init__(self) -> None:
        if len(self.states) not in (len(self.moves), len(self.moves) + 1):
            raise ValueError(
                f"EpisodeRecord.states has {len(self.states)} entries; expected one per move ({len(self.moves)})"
                " or one more (the screen after the last move)"
            )


def state_of(obs: Observation) -> str:
    """What replay compares: the harness's ``state_key`` where it names one (a screen with a
    ticking clock), else the screenshot's content hash."""
    return obs.state_key or content_hash(obs.screenshot)


def forks(harness: Harness | type[Harness]) -> bool:
    """Whether the harness copies its state (overrides ``Harness.fork``), rather than replaying."""
    kind = harness if isinstance(harness, type) else type(harness)
    return kind.fork is not Harness.fork


def replay(harness: Harness, record: EpisodeRecord, turn: int) -> tuple[Observation, dict[str, Any]]:
    """Bring ``harness`` to the screen turn ``turn`` of ``record`` was made on (0: the reset
    screen): reset, then the first ``turn`` moves, each screen checked against the record.

    Returns that screen's observation and the last info; raises ``ReplayDivergence`` at the first
    screen whose state differs, or when the episode ends before ``turn``."""
    if not 0 <= turn < len(record.states):
        raise ValueError(f"replay turn={turn}; expected 0..{len(record.states) - 1} (the record's screens)")
    obs, info = harness.reset(seed=record.seed, options=record.options)
    _expect_state(0, record.states[0], obs)
    for index, move in enumerate(record.moves[:turn]):
        if move is not None:
            try:
                obs, _, terminated, truncated, info = harness.step(move)
            except ActionError:
                pass  # refused again, as it was when recorded: the screen stays
            else:
                if (terminated or truncated) and index + 1 < len(record.moves):
                    got = state_of(obs)
                    detail = f"the episode ended after move {index} ({move}); the recorded one went on"
                    raise ReplayDivergence(index + 1, record.states[index + 1], got, detail)
        _expect_state(index + 1, record.states[index + 1], obs)
    return obs, info


def _expect_state(turn: int, expected: str, obs: Observation) -> None:
    got = state_of(obs)
    if got != expected:
        raise ReplayDivergence(turn, expected, got)
