"""Step-level credit from the states the agent saw: GiGPO's scheme, anchored on screenshots.

Episode advantages compare whole trajectories of a group, so every turn of a trajectory shares
one number: in a ten-turn episode the turn that opened the wrong menu and the nine right ones
are judged alike. But the trajectories of a group start from the same screen and often pass
through the same screens again (the form after its first field is filled, the dialog every
path opens). Turns made in equal states form a *step group*; within it, what followed each turn
is comparable, since the state was the same.

For a group's trajectories, each turn ``t`` made in state ``s_t`` (``SeqMeta.turn_states``: the
screenshot's content hash, or the harness's ``Observation.state_key``) has the discounted return
``R_t = r_t + gamma * R_{t+1}`` of its move's reward and those after it (``turn_rewards``; the
episode's final reward, as the grader and penalties left it, differs from their sum only at the
last turn). The turns of one step group get the group's estimator over their returns (GRPO: mean
and std), ``A_step``; a turn alone in its state, or in an unknown state (''), gets 0. The tokens
a turn generated get ``A_episode + weight * A_step``.

verl-agent's GiGPO forms step groups from text observations only; here every screenshot already
has a content hash (the store's identity of its pixels), so GUI agents get step groups for free,
and a harness whose screens carry noise (a clock, a cursor blink) names its own key instead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from vlrl.config import Ge, Le
from vlrl.control.advantages import Estimator, group_advantages
from vlrl.records import SeqMeta


@dataclass(kw_only=True, slots=True)
class StepCredit:
    """Step-level credit (``advantage.step_credit``): turns made in equal states are compared."""

    weight: Annotated[float, Ge(0)] = 1.0
    """How much the step advantage adds to the episode advantage on a turn's tokens."""

    gamma: Annotated[float, Ge(0), Le(1)] = 0.95
    """Discount of later rewards in a turn's return: below 1, of two trajectories that reach the
    same success from one state, the shorter one's turns score higher."""


@dataclass(frozen=True, slots=True)
class StepGroups:
    """What step credit made of one group."""

    advantages: list[np.ndarray]
    """Per sequence, ``(turns,)`` float64: each request's step advantage."""
    turns: int
    """Turns in the group."""
    grouped: int
    """Turns that share their state with another turn of the group."""


def step_groups(
    metas: Sequence[SeqMeta], rewards: Sequence[float], estimator: Estimator, *, gamma: float, eps: float
) -> StepGroups:
    """Step advantages of one group's turns (module docstring). ``rewards``: each sequence's
    final episode reward, in the order of ``metas``; the sequences of one trajectory (equal
    ``sample_index``) are its consecutive requests, in order."""
    by_trajectory: dict[int, list[int]] = defaultdict(list)
    for i, meta in enumerate(metas):
        by_trajectory[meta.sample_index].append(i)
    returns = [np.zeros(meta.turns) for meta in metas]
    for members in by_trajectory.values():
        turn_rewards = np.concatenate([_turn_rewards(metas[i]) for i in members])  # the whole trajectory's
        turn_rewards[-1] += rewards[members[-1]] - turn_rewards.sum()
        discounted = np.zeros_like(turn_rewards)
        following = 0.0
        for t in range(len(turn_rewards) - 1, -1, -1):
            following = turn_rewards[t] + gamma * following
            discounted[t] = following
        start = 0
        for i in members:
            returns[i] = discounted[start : start + metas[i].turns]
            start += metas[i].turns
    members_of: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, meta in enumerate(metas):
        for t, state in enumerate(meta.turn_states):
            if state:
                members_of[state].append((i, t))
    advantages = [np.zeros(meta.turns) for meta in metas]
    grouped = 0
    for members in members_of.values():
        if len(members) < 2:
            continue
        grouped += len(members)
        step = group_advantages([returns[i][t] for i, t in members], estimator, eps=eps)
        for (i, t), value in zip(members, step):
            advantages[i][t] = value
    return StepGroups(advantages, sum(meta.turns for meta in metas), grouped)


def spread_over_turns(meta: SeqMeta, loss_mask: np.ndarray, per_turn: np.ndarray) -> np.ndarray:
    """Each request's value on the tokens it generated (those of ``loss_mask`` from its context
    length to the next request's), 0 elsewhere: ``(T,)`` float32."""
    ends = (*meta.context_lengths[1:], meta.num_tokens)
    out = np.zeros(meta.num_tokens, dtype=np.float32)
    for start, end, value in zip(meta.context_lengths, ends, per_turn):
        out[start:end] = value
    return np.where(loss_mask, out, np.float32(0))


def _turn_rewards(meta: SeqMeta) -> np.ndarray:
    """The sequence's per-request rewards; zeros when the rollout did not record them (the
    episode's reward then falls on its last request)."""
    if meta.turn_rewards:
        return np.asarray(meta.turn_rewards, dtype=np.float64)
    return np.zeros(meta.turns)
