"""Advantages of a branching group (``control.branch_credit``): a shared prefix judged by every
episode that continued it, siblings compared at their branch point, and the per-token values the
accept-time hook writes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.helpers.payloads import loss_mask
from vlrl.control.advantages import group_advantages
from vlrl.control.branch_credit import branch_turn_advantages
from vlrl.control.group_hook import GroupHook
from vlrl.control.sampler import PassRateSampler
from vlrl.records import SeqMeta
from vlrl.store import LocalStore


def trajectory(index: int, turns: int, reward: float, branch_of: tuple[int, int] = ()) -> tuple[SeqMeta, tuple]:
    """One sequence of ``turns`` requests, each a 2-token prompt then a 1-token reply."""
    layout = (2, 1) * turns
    mask = loss_mask(layout)
    meta = SeqMeta(
        key=f"g/{index}", group_id="g", source="s", sample_index=index, reward=reward, success=reward > 0,
        finish="done", turns=turns, num_tokens=mask.size, num_response_tokens=turns,
        context_lengths=tuple(range(2, 3 * turns, 3)), policy_version=0, branch_of=branch_of,
    )  # fmt: skip
    return meta, layout


# A tree: root 0 (3 turns) solved it; branches 1 and 2 restarted it at turn 1 and failed; a second
# root 3 without branches failed too.
TREE = [(0, 3, 1.0, ()), (1, 2, 0.0, (0, 1)), (2, 2, 0.0, (0, 1)), (3, 3, 0.0, ())]


def _metas():
    return [trajectory(*spec)[0] for spec in TREE]


def test_the_prefix_takes_the_mean_of_its_continuations_and_siblings_compare_at_the_point():
    metas = _metas()
    rewards = [m.reward for m in metas]
    episode = group_advantages(rewards, "dr_grpo")  # mean 0.25: 0.75, -0.25, -0.25, -0.25
    got = branch_turn_advantages(metas, rewards, episode, "dr_grpo", weight=1.0, eps=1e-6)
    point = 1 - 1 / 3  # siblings 0, 1, 2 at turn 1: rewards 1, 0, 0 (mean 1/3)
    # root 0: turn 0 was taken by the root and both branches (mean 0.75, -0.25, -0.25); from turn 1 on
    # only by the root, plus its advantage among the siblings of turn 1
    np.testing.assert_allclose(got[0], [0.25 / 3, 0.75 + point, 0.75 + point])
    np.testing.assert_allclose(got[1], [-0.25 - 1 / 3] * 2)
    np.testing.assert_allclose(got[2], [-0.25 - 1 / 3] * 2)
    np.testing.assert_allclose(got[3], [-0.25] * 3)  # no branches: the flat episode advantage
    half = branch_turn_advantages(metas, rewards, episode, "dr_grpo", weight=0.5, eps=1e-6)
    np.testing.assert_allclose(half[1], [-0.25 - 1 / 6] * 2)


def test_a_root_turn_gets_its_latest_point_and_a_split_trajectory_counts_its_turns_on():
    # root 0 of 4 turns in two sequences (a history window), branches at turns 1 and 3
    first = replace(trajectory(0, 2, 1.0)[0], key="g/0/0")
    second = replace(trajectory(0, 2, 1.0)[0], key="g/0/1")
    metas = [first, second, trajectory(1, 3, 0.0, (0, 1))[0], trajectory(2, 1, 1.0, (0, 3))[0]]
    rewards = [1.0, 1.0, 0.0, 1.0]
    episode = np.array([1.0, 1.0, -1.0, 1.0])  # given, to follow the arithmetic
    got = branch_turn_advantages(metas, rewards, episode, "dr_grpo", weight=1.0, eps=1e-6)
    # turn 0: root, branch 1 (t=1), branch 2 (t=3) took it: mean 1/3; turn 1..2: root and branch 2: 1
    # point 1: rewards 1, 0 -> +0.5 / -0.5; point 3: rewards 1, 1 -> 0
    np.testing.assert_allclose(got[0], [1 / 3, 1 + 0.5])
    np.testing.assert_allclose(got[1], [1 + 0.5, 1 + 0.0])
    np.testing.assert_allclose(got[2], [-1 - 0.5] * 3)
    np.testing.assert_allclose(got[3], [1.0])


def test_a_branch_whose_root_is_missing_is_named():
    metas = [trajectory(1, 2, 0.0, (0, 1))[0], trajectory(3, 2, 1.0)[0]]
    with pytest.raises(ValueError, match="trajectory 1 branched from 0, which is not in the group"):
        branch_turn_advantages(metas, [0.0, 1.0], np.array([-1.0, 1.0]), "grpo", weight=1.0, eps=1e-6)


def test_the_hook_writes_branch_credit_per_token():
    store = LocalStore()
    metas = []
    for spec in TREE:
        meta, layout = trajectory(*spec)
        mask = loss_mask(layout)
        store.put(meta.key, {"token_ids": np.zeros(mask.size, np.int32), "logprobs": np.zeros(mask.size, np.float32), "loss_mask": mask})
        metas.append(meta)
    everything = PassRateSampler.Config(min_pass_rate=0.0, max_pass_rate=1.0, include_min=True, include_max=True)
    decision = GroupHook.Config(estimator="dr_grpo", sampler=everything).build()(metas, store)
    assert decision.accepted and decision.advantages == (0.75, -0.25, -0.25, -0.25)  # the episode estimate
    rows = store.get([m.key for m in metas], fields=["advantages"])
    point = 2 / 3
    np.testing.assert_allclose(rows["g/0"]["advantages"], [0, 0, 0.25 / 3, 0, 0, 0.75 + point, 0, 0, 0.75 + point], rtol=1e-6)
    np.testing.assert_allclose(rows["g/1"]["advantages"], [0, 0, -0.25 - 1 / 3] * 2, rtol=1e-6)
