"""The accept-time hook: what happens to one group when its last trajectory finishes.

Reward mode, in order, everything but the last step on metadata:

1. the pass-rate sampler accepts or rejects the group (rewards as rollout or grader left them);
2. the overlong penalty is added to each reward;
3. group-relative advantages are computed from those rewards, then the user's shaping hook;
4. a group whose advantages are all exactly zero is dropped (it would add nothing to the loss
   but tokens to the batch);
5. only the ``loss_mask`` column of the group's keys is read, and each sequence's scalar
   advantage is written back per token as the float32 field ``advantages``.

With ``step_credit`` (``control.step_credit``), each turn's tokens also get ``weight`` times its
step advantage (its return against the other turns of the group made in the same state); the
drop test of step 4 then looks at the per-token sums, since trajectories of equal reward may
still differ turn by turn.

A branching group (sequences with ``SeqMeta.branch_of``) gets its advantages per turn in step 5:
the episode estimate, averaged over the trajectories that share a turn, plus ``branch_weight``
times the branch-point estimate (``control.branch_credit``).

OPD mode replaces steps 1-3: a teacher scorer has already written ``teacher_logprobs`` into the
store, and the per-token advantage is ``teacher_logprobs - logprobs`` on generated tokens, read
from the ``logprobs``, ``teacher_logprobs`` and ``loss_mask`` columns only.

The hook never deletes keys: the driver deletes a rejected or dropped group's sequences (and
drops their image references), since it owns key lifetimes: no key outlives its last owner (the
step that consumed it, or the replay buffer that kept it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np

from vlrl.config import ConfigError, Ge, Gt, NonEmpty
from vlrl.control.advantages import (
    Estimator,
    ShapingError,
    apply_shaping,
    group_advantages,
    opd_token_advantages,
    resolve_shaping,
    token_advantages,
)
from vlrl.control.branch_credit import branch_turn_advantages
from vlrl.control.penalties import OverlongPenalty
from vlrl.control.sampler import PassRateSampler
from vlrl.control.step_credit import StepCredit, spread_over_turns, step_groups
from vlrl.records import ADVANTAGES, LOGPROBS, LOSS_MASK, TEACHER_LOGPROBS, GroupDecision, SeqMeta, group_id_of
from vlrl.store import DuplicateWriteError, PayloadStore
from vlrl.store.sequence_rows import own_rows, read_sequences


class MissingTeacherScores(LookupError):
    """OPD mode reached a group before its teacher scores were in the store."""


class GroupHook:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Sampling, penalties, advantages and shaping of each finished group."""

        mode: Literal["reward", "opd"] = "reward"
        """``reward``: advantages from group rewards. ``opd``: per-token teacher-minus-student
        logprobs (sampler, penalty, estimator and shaping are not used)."""

        estimator: Estimator = "grpo"
        """Group-relative estimator: ``grpo`` (mean and std), ``dr_grpo`` (mean only) or ``rloo``."""

        eps: Annotated[float, Gt(0)] = 1e-6
        """Added to the group std under ``grpo``."""

        sampler: PassRateSampler.Config = field(default_factory=PassRateSampler.Config)
        """Pass-rate window a group must fall in."""

        overlong: OverlongPenalty.Config | None = None
        """Overlong soft penalty on response length, or None for none."""

        shaping: Annotated[str, NonEmpty()] | None = None
        """Advantage shaping hook as ``'module:function'``, a callable ``(metas, advantages) ->
        advantages``; None for none."""

        drop_zero_advantage: bool = True
        """Drop a group whose advantages (after shaping) are all exactly zero."""

        branch_weight: Annotated[float, Ge(0)] = 1.0
        """How much a branching group's branch-point estimate (siblings compared where they
        branched, ``control.branch_credit``) adds to the episode estimate; groups of sources without
        ``branching`` have none."""

        step_credit: StepCredit | None = None
        """Step-level credit: turns made in equal states (equal screenshots, or the harness's
        ``state_key``) compared with each other, added to the episode advantage; None for
        episode advantages only."""

        def check(self) -> None:
            if self.shaping is not None:
                try:
                    resolve_shaping(self.shaping)
                except ShapingError as error:
                    raise ConfigError(
                        "shaping", self.shaping, "a 'module:function' reference to a shaping callable", hint=str(error)
                    ) from None

        def build(self) -> GroupHook:
            return GroupHook(self)

    def __init__(self, config: GroupHook.Config) -> None:
        self.config = config
        self.sampler = config.sampler.build()
        self.overlong = None if config.overlong is None else config.overlong.build()
        self.shaping = None if config.shaping is None else resolve_shaping(config.shaping)

    def __call__(self, metas: Sequence[SeqMeta], store: PayloadStore) -> GroupDecision:
        group_id = group_id_of(metas)
        if self.config.mode == "opd":
            return self._opd(group_id, metas, store)
        keys = tuple(m.key for m in metas)
        sampled = self.sampler.decide(metas)
        if not sampled.accepted:
            return GroupDecision(group_id, "rejected", sampled.reason, keys)
        rewards = np.array([m.reward for m in metas]) if self.overlong is None else self.overlong.apply(metas)  # (n,)
        advantages = group_advantages(rewards, self.config.estimator, eps=self.config.eps)  # (n,)
        if self.shaping is not None:
            advantages = apply_shaping(self.shaping, metas, advantages)
        final = tuple(advantages.tolist())
        credit = self.config.step_credit
        if credit is None and self.config.drop_zero_advantage and not advantages.any():
            return GroupDecision(group_id, "dropped", f"{sampled.reason}; all advantages zero", keys, final)
        rows = read_sequences(store, metas, [LOSS_MASK])
        masks = [_column(rows, m, LOSS_MASK) for m in metas]
        if any(m.branch_of for m in metas):
            per_turn = branch_turn_advantages(
                metas, rewards.tolist(), advantages, self.config.estimator,
                weight=self.config.branch_weight, eps=self.config.eps,
            )  # fmt: skip
            per_token = [spread_over_turns(m, mask, a) for m, mask, a in zip(metas, masks, per_turn)]
        else:
            per_token = [token_advantages(mask, a) for mask, a in zip(masks, advantages)]
        turns = (0, 0)
        if credit is not None:
            steps = step_groups(metas, rewards.tolist(), self.config.estimator, gamma=credit.gamma, eps=self.config.eps)
            per_token = [
                episode + np.float32(credit.weight) * spread_over_turns(m, mask, step)
                for episode, m, mask, step in zip(per_token, metas, masks, steps.advantages)
            ]
            turns = (steps.grouped, steps.turns)
            if self.config.drop_zero_advantage and not any(a.any() for a in per_token):
                return GroupDecision(group_id, "dropped", f"{sampled.reason}; all advantages zero", keys, final, turns)
        _write(store, metas, per_token)
        return GroupDecision(group_id, "accepted", sampled.reason, keys, final, turns)

    def _opd(self, group_id: str, metas: Sequence[SeqMeta], store: PayloadStore) -> GroupDecision:
        keys = tuple(m.key for m in metas)
        missing = [k for k in keys if TEACHER_LOGPROBS not in store.schema(k)]  # schema reads no payload
        if missing:
            raise MissingTeacherScores(
                f"group {group_id!r}: keys {missing} have no {TEACHER_LOGPROBS!r} field; "
                "the teacher scorer must finish a group before the accept-time hook runs"
            )
        rows = read_sequences(store, metas, [LOGPROBS, TEACHER_LOGPROBS, LOSS_MASK])
        per_token = [
            opd_token_advantages(
                _column(rows, m, LOGPROBS), _column(rows, m, TEACHER_LOGPROBS), _column(rows, m, LOSS_MASK)
            )
            for m in metas
        ]  # n x (T_i,) float32
        means = tuple(float(a.sum() / max(m.num_response_tokens, 1)) for a, m in zip(per_token, metas))
        if self.config.drop_zero_advantage and not any(a.any() for a in per_token):
            reason = "OPD: teacher and student agree on every token"
            return GroupDecision(group_id, "dropped", reason, keys, means)
        _write(store, metas, per_token)
        return GroupDecision(group_id, "accepted", "OPD: teacher-scored", keys, means)


def _column(rows: dict[str, dict[str, np.ndarray]], meta: SeqMeta, name: str) -> np.ndarray:
    """One per-token column of ``meta``'s row, checked against its length in metadata."""
    column = rows[meta.key][name]
    if column.shape != (meta.num_tokens,):
        raise ValueError(
            f"store key {meta.key!r}: field {name!r} has shape {column.shape}; SeqMeta.num_tokens={meta.num_tokens} "
            f"expects ({meta.num_tokens},)"
        )
    return column


def _write(store: PayloadStore, metas: Sequence[SeqMeta], per_token: list[np.ndarray]) -> None:
    """Write each sequence's ``(T_i,)`` advantages, once all were computed and checked: a bad row
    fails the group before any of it is written. A row already there was written by an earlier
    attempt of this hook that a store error cut short (the driver retries it), with the same
    values: the retry writes the rest."""
    for meta, advantages in zip(metas, per_token):
        try:
            store.add_fields(meta.key, {ADVANTAGES: own_rows(meta, advantages)})  # a branch stores no prefix rows
        except DuplicateWriteError:
            continue
