"""Step-level credit: step groups from equal state keys only, discounted returns, the per-token
sum the hook writes, and the drop rule it changes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.helpers.payloads import loss_mask
from vlrl.config import ConfigError, validate
from vlrl.control.group_hook import GroupHook
from vlrl.control.step_credit import StepCredit, spread_over_turns, step_groups
from vlrl.records import SeqMeta
from vlrl.store import LocalStore


def trajectory(index: int, states: list[str], rewards: list[float], *, layout_per_turn=(2, 1)) -> tuple[SeqMeta, tuple]:
    """One sequence of ``len(states)`` requests: each turn's prompt (observation) then its reply."""
    layout = tuple(n for _ in states for n in layout_per_turn)
    mask = loss_mask(layout)
    starts = np.cumsum([0, *layout])[1::2].tolist()  # each reply starts after its turn's prompt
    meta = SeqMeta(
        key=f"g/{index}", group_id="g", source="s", sample_index=index, reward=float(sum(rewards)),
        success=sum(rewards) > 0, finish="done", turns=len(states), num_tokens=mask.size,
        num_response_tokens=int(mask.sum()), context_lengths=tuple(starts), policy_version=0,
        turn_states=tuple(states), turn_rewards=tuple(rewards),
    )  # fmt: skip
    return meta, layout


def test_turns_in_equal_states_form_step_groups_and_compare_their_discounted_returns():
    metas = [
        trajectory(0, ["s0", "a", "b"], [0, 0, 1])[0],  # returns at gamma 0.5: 0.25, 0.5, 1
        trajectory(1, ["s0", "a", "c"], [0, 0, 0])[0],  # 0, 0, 0
        trajectory(2, ["s0", "d"], [0, 1])[0],  # 0.5, 1
        trajectory(3, ["", ""], [0, 0])[0],  # unknown states are compared with nothing, not each other
    ]
    steps = step_groups(metas, [m.reward for m in metas], "dr_grpo", gamma=0.5, eps=1e-6)
    # s0: returns 0.25, 0, 0.5 (mean 0.25); a: 0.5, 0 (mean 0.25); b, c, d alone
    expected = [[0.0, 0.25, 0.0], [-0.25, -0.25, 0.0], [0.25, 0.0], [0.0, 0.0]]
    for got, want in zip(steps.advantages, expected):
        np.testing.assert_allclose(got, want)
    assert (steps.grouped, steps.turns) == (5, 10)


def test_the_final_reward_counts_on_the_last_turn_and_one_trajectory_spans_its_sequences():
    first, _ = trajectory(0, ["s0", "a"], [0, 0])
    second = replace(trajectory(0, ["b"], [0])[0], key="g/0/1")  # the same trajectory, a second sequence
    other, _ = trajectory(1, ["s0", "a", "b"], [0, 0, 0])
    metas = [first, second, other]
    # a grader gave trajectory 0 reward 1 (its harness rewards summed to 0): it lands on its last turn
    steps = step_groups(metas, [1.0, 1.0, 0.0], "dr_grpo", gamma=0.5, eps=1e-6)
    # trajectory 0 returns 0.25, 0.5 | 1; trajectory 1: 0, 0, 0; groups s0, a, b each of two
    np.testing.assert_allclose(steps.advantages[0], [0.125, 0.25])
    np.testing.assert_allclose(steps.advantages[1], [0.5])
    np.testing.assert_allclose(steps.advantages[2], [-0.125, -0.25, -0.5])


def test_a_turns_value_lands_on_the_tokens_it_generated():
    meta, layout = trajectory(0, ["x", "y", "z"], [0, 0, 0], layout_per_turn=(2, 3))
    spread = spread_over_turns(meta, loss_mask(layout), np.array([1.0, 2.0, 3.0]))
    assert spread.tolist() == [0, 0, 1, 1, 1, 0, 0, 2, 2, 2, 0, 0, 3, 3, 3]


def _stored_group(store, specs):
    metas = []
    for index, (states, rewards) in enumerate(specs):
        meta, layout = trajectory(index, states, rewards)
        store.put(meta.key, {"token_ids": np.zeros(meta.num_tokens, np.int32), "logprobs": np.zeros(meta.num_tokens, np.float32), "loss_mask": loss_mask(layout)})
        metas.append(meta)
    return metas


def test_the_hook_writes_episode_plus_weighted_step_advantages_per_turn():
    store = LocalStore()
    metas = _stored_group(store, [(["s0", "a"], [0, 1]), (["s0", "b"], [0, 0])])
    credit = StepCredit(weight=0.5, gamma=1.0)
    decision = GroupHook.Config(estimator="dr_grpo", step_credit=credit).build()(metas, store)
    assert decision.accepted and decision.advantages == (0.5, -0.5) and decision.step_turns == (2, 4)
    rows = store.get([m.key for m in metas], fields=["advantages"])
    # s0 is shared: returns 1 and 0, step advantages +0.5 / -0.5, weighted 0.5; a, b alone
    assert rows["g/0"]["advantages"].tolist() == [0, 0, 0.75, 0, 0, 0.5]
    assert rows["g/1"]["advantages"].tolist() == [0, 0, -0.75, 0, 0, -0.5]


def test_equal_rewards_reached_by_paths_of_different_length_train_under_step_credit_only():
    specs = [(["s0", "a"], [0, 1]), (["s0", "b", "c"], [0, 0, 1])]  # both succeed, one a turn later
    store = LocalStore()
    plain = GroupHook.Config(sampler=_everything()).build()(_stored_group(store, specs), store)
    assert plain.status == "dropped"
    store = LocalStore()
    decision = GroupHook.Config(sampler=_everything(), step_credit=StepCredit(gamma=0.9)).build()(_stored_group(store, specs), store)
    assert decision.accepted
    rows = store.get(["g/0", "g/1"], fields=["advantages"])
    assert rows["g/0"]["advantages"][2] > 0 > rows["g/1"]["advantages"][2]  # the shorter path's first turn wins


def _everything():
    from vlrl.control.sampler import PassRateSampler

    return PassRateSampler.Config(include_min=True, include_max=True)


@pytest.mark.parametrize(("field", "value"), [("weight", -1.0), ("gamma", 1.5)])
def test_bad_settings_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        validate(StepCredit(**{field: value}))


def test_a_record_with_states_or_rewards_not_one_per_request_is_refused():
    meta, _ = trajectory(0, ["a", "b"], [0, 1])
    with pytest.raises(ValueError, match="turn_states has 1 entries; expected one per request"):
        replace(meta, turn_states=("a",))
    with pytest.raises(ValueError, match="turn_rewards"):
        replace(meta, turn_rewards=(0.0, float("nan")))
