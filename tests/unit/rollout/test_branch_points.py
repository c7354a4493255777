"""Branching settings: where a tree branches (uniform and reproducible, or where the policy was
least sure), how many trees keep a group at flat GRPO's env steps, and the settings it refuses."""

from __future__ import annotations

import pytest

from vlrl.config import AgentBehaviour, Branching, ConfigError, DataSource, ExternalAgent, validate
from vlrl.records import SeqMeta
from vlrl.rollout.branching import branch_points


def test_uniform_points_are_distinct_later_turns_drawn_the_same_on_a_rerun():
    uniform = Branching(points=3)
    drawn = {tuple(branch_points(uniform, [0.0] * 8, f"g/0/{i}")) for i in range(40)}
    assert all(len(p) == 3 and list(p) == sorted(set(p)) and 1 <= p[0] and p[-1] <= 7 for p in drawn)
    assert len(drawn) > 10  # they vary with the trajectory...
    assert branch_points(uniform, [0.0] * 8, "g/0/5") == branch_points(uniform, [0.0] * 8, "g/0/5")  # ...not with the run
    assert branch_points(uniform, [0.0, 0.0], "g") == [1]  # a two-turn episode has one point
    assert branch_points(uniform, [0.0], "g") == []  # a one-turn episode has none


def test_entropy_points_are_the_least_sure_turns_after_the_first():
    surprisal = [9.0, 0.1, 2.5, 0.3, 2.5, 1.0]
    assert branch_points(Branching(points=2, choose="entropy"), surprisal, "g") == [2, 4]  # turn 0 is no point
    assert branch_points(Branching(points=1, choose="entropy"), surprisal, "g") == [2]  # a tie goes to the earlier


def test_trees_keep_the_expected_env_steps_of_the_flat_group():
    assert Branching(points=1, branches=2).trees(8) == 4  # 4 trees of 1 + 2 * 1/2 episodes
    assert Branching(points=2, branches=2).trees(8) == round(8 / 3)
    assert Branching(points=4, branches=4).trees(2) == 1
    assert DataSource(group_size=8, branching=Branching()).runs_per_group == 4
    assert DataSource(group_size=8).runs_per_group == 8


def test_settings_it_refuses_are_named():
    with pytest.raises(ConfigError, match="branching.*external"):
        validate(DataSource(branching=Branching(), external=ExternalAgent(entry="my_agent:play")))
    with pytest.raises(ConfigError, match="agent.max_turns.*at least 2 with branching"):
        validate(DataSource(branching=Branching(), agent=AgentBehaviour(max_turns=1)))
    with pytest.raises(ConfigError, match="branches"):
        validate(DataSource(branching=Branching(branches=0)))


def test_a_branch_record_names_its_root_and_turn():
    base = dict(key="k", group_id="g", source="s", reward=0.0, success=False, finish="done", turns=1,
                num_tokens=3, num_response_tokens=1, context_lengths=(2,), policy_version=0)  # fmt: skip
    assert SeqMeta(sample_index=2, branch_of=(0, 1), **base).branch_of == (0, 1)
    for bad in ((0, 0), (2, 1), (-1, 1)):
        with pytest.raises(ValueError, match=r"branch_of=.*expected \(\) or"):
            SeqMeta(sample_index=2, branch_of=bad, **base)
