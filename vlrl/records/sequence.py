"""``SeqMeta``: the small record of one stored sequence, all the driver ever sees of it.

The payload (``fields.ROLLOUT_FIELDS``, and fields written later such as advantages) lives in the
store under ``key``; images live once per content hash under their own keys and appear here only
as ``MMItemMeta``. No arrays: the driver's memory grows with the number of sequences, not with
their length or their pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from vlrl.records.image import MMItemMeta

Finish = Literal["done", "max_turns", "truncated"]
"""Why an episode ended: the harness said done (terminated), the Agent Loop ran out of turns,
or the harness truncated it (its step limit). A failed episode has no SeqMeta: it is a counted
tenant outcome instead."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqMeta:
    key: str
    """Store key of the sequence's payload."""
    group_id: str
    """The group it belongs to: the trajectories of one task under one source."""
    source: str
    """Name of the data source it was rolled out for."""
    sample_index: int
    """Index of its trajectory within the group."""
    reward: float
    """Episode reward (after a grader rewrote it, if one ran); finite."""
    success: bool
    """Whether the harness judged the task solved."""
    finish: Finish
    """Why the episode ended."""
    turns: int
    """Requests to the policy this sequence holds."""
    num_tokens: int
    """Tokens of the whole sequence, prompt included: the length of every per-token field."""
    num_response_tokens: int
    """Tokens the policy generated (``loss_mask`` true)."""
    context_lengths: tuple[int, ...]
    """Context length (tokens) at each request to the policy, in order."""
    policy_version: int
    """Oldest policy version that sampled any of its tokens."""
    turn_versions: tuple[int, ...] = ()
    """The policy version that sampled each turn's tokens, per request in order (an episode in
    flight across a weight update continues on the new weights, so its turns differ); () when
    every turn is ``policy_version``."""
    turn_tokens: tuple[int, ...] = ()
    """Tokens the policy generated at each request, in order; they start at that request's
    ``context_lengths`` entry. () with ``turn_versions`` ()."""
    turn_states: tuple[str, ...] = ()
    """The key of the state each request was made in, in order (the observation's
    ``state_key``, else its screenshot's content hash): step-level credit compares the turns of a
    group made in equal states ('' where unknown). () when not recorded."""
    turn_rewards: tuple[float, ...] = ()
    """What each request's move earned, in order (step rewards, less invalid-reply penalties);
    () when not recorded."""
    images: tuple[MMItemMeta, ...] = ()
    """Unique images of the sequence."""
    image_offsets: tuple[tuple[int, int], ...] = ()
    """(token offset of the image's first placeholder, index into ``images``) per occurrence."""
    extra_fields: tuple[str, ...] = ()
    """Names of the optional per-token payload fields (``extra/...``) this sequence has."""
    task: str = ""
    """The task family the episode was drawn from (the harness's ``info["task"]`` at reset; ''
    when the harness does not say): per-task success in evaluation reports."""
    branch_of: tuple[int, int] = ()
    """For a branch of a branching rollout (``DataSource.branching``): ``(sample index of the
    trajectory it branched from, the turn it branched at)``. The branch replayed that trajectory's
    first ``turn`` moves and shares its prefix; its own requests start at that turn, the prefix
    sits in its prompt. () for a trajectory played from reset."""
    prefix_key: str = ""
    """A branch's shared prefix: the key of the sequence (its tree's root) whose first
    ``prefix_tokens`` token rows are this sequence's first rows too. They are stored once, under
    that key; this key stores the rows after them, and holds one reference to that key
    (``mm.sequence_refs``). '' when every row is stored under ``key``."""
    prefix_tokens: int = 0
    """How many of the first token rows are read from ``prefix_key`` (0 without one)."""
    prefix_shared: bool = False
    """Branches hold references to this key (it is their ``prefix_key``): deleting the sequence drops
    its own reference only, and the key goes with its last holder (``mm.delete_sequences``)."""
    replay_of: str = ""
    """The kept sequence this one copies (``control.replay``): a success of an earlier group of
    the same task, replayed into this group; its tokens are as old as the original's and the
    replay's own age bound applies to them, not the batch's staleness bound. '' when fresh."""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"SeqMeta.key={self.key!r}; expected a non-empty store key")
        if not math.isfinite(self.reward):
            raise ValueError(f"SeqMeta.reward={self.reward}; expected a finite number")
        if not 0 <= self.num_response_tokens <= self.num_tokens:
            raise ValueError(
                f"SeqMeta.num_response_tokens={self.num_response_tokens}; expected 0..num_tokens={self.num_tokens}"
            )
        if any(not 0 < n <= self.num_tokens for n in self.context_lengths):
            raise ValueError(f"SeqMeta.context_lengths={self.context_lengths}; expected values in 1..{self.num_tokens}")
        if (self.turn_versions or self.turn_tokens) and not (
            len(self.turn_versions) == len(self.turn_tokens) == len(self.context_lengths)
            and sum(self.turn_tokens) == self.num_response_tokens
            and min(self.turn_versions) == self.policy_version
        ):
            raise ValueError(
                f"SeqMeta.turn_versions={self.turn_versions}, turn_tokens={self.turn_tokens}; expected one each per"
                f" request ({len(self.context_lengths)}), tokens summing to num_response_tokens="
                f"{self.num_response_tokens} and the oldest version equal to policy_version={self.policy_version}"
            )
        for name in ("turn_states", "turn_rewards"):
            value = getattr(self, name)
            if value and len(value) != len(self.context_lengths):
                raise ValueError(
                    f"SeqMeta.{name} has {len(value)} entries; expected one per request ({len(self.context_lengths)})"
                )
        if not all(math.isfinite(r) for r in self.turn_rewards):
            raise ValueError(f"SeqMeta.turn_rewards={self.turn_rewards}; expected finite numbers")
        if self.branch_of and not (
            len(self.branch_of) == 2 and self.branch_of[0] >= 0 and self.branch_of[1] >= 1
            and self.branch_of[0] != self.sample_index
        ):  # fmt: skip
            raise ValueError(
                f"SeqMeta.branch_of={self.branch_of}; expected () or (another trajectory's sample index, a turn >= 1)"
            )
        if bool(self.prefix_key) != (self.prefix_tokens > 0) or not 0 <= self.prefix_tokens < self.num_tokens:
            raise ValueError(
                f"SeqMeta.prefix_key={self.prefix_key!r}, prefix_tokens={self.prefix_tokens}; expected both set (a"
                f" key and 1..num_tokens-1={self.num_tokens - 1} rows) or neither"
            )
        if self.prefix_key == self.key:
            raise ValueError(f"SeqMeta.prefix_key={self.prefix_key!r}; expected another sequence's key than its own")
        for offset, index in self.image_offsets:
            if not (0 <= offset < self.num_tokens and 0 <= index < len(self.images)):
                raise ValueError(
                    f"SeqMeta.image_offsets has ({offset}, {index}); expected offset < {self.num_tokens} "
                    f"and index < {len(self.images)}"
                )

    @property
    def newest_version(self) -> int:
        """Newest policy version that sampled any of its tokens."""
        return max(self.turn_versions, default=self.policy_version)

    def version_tokens(self) -> list[tuple[int, int]]:
        """``(policy version, generated tokens)`` of each request, in order."""
        return list(zip(self.turn_versions, self.turn_tokens)) or [(self.policy_version, self.num_response_tokens)]

    def stale_tokens(self, min_version: int) -> int:
        """Generated tokens a step that trains from ``min_version`` on leaves out of the loss:
        those sampled by an older policy, none of a replayed sequence (``replay_of``)."""
        if self.replay_of:
            return 0
        return sum(n for v, n in self.version_tokens() if v < min_version)


@dataclass(frozen=True, slots=True)
class TreeRollout:
    """What one tree of a branching rollout returns to the driver: its sequences (the root's and
    every branch's) and how its branches got their start, for the books."""

    metas: tuple[SeqMeta, ...]
    forks: int = 0
    """Branches whose harness instance was forked from a sibling's (``Harness.fork``)."""
    replays: int = 0
    """Branches whose instance replayed the root's moves to the branch point."""
    failures: tuple[str, ...] = ()
    """One reason per branch that could not start (a replay that diverged, naming the turn; a
    fork that failed): those branches are left out, the tree and its group go on."""
