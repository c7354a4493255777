"""``vlrl.recipes``: every config a run's config tree can hold is importable from it, under the
name ``--set`` selects it by; ``base_recipe`` sizes an env pool per codebase and validates."""

from __future__ import annotations

from typing import get_args

import pytest

import vlrl.recipes as recipes
from vlrl.config import DataSource, config_name, field_types, validate
from vlrl.config.schema import is_config_type, split_annotated, union_members


def config_classes(root: type) -> set[type]:
    """Every config class reachable from ``root``'s fields (through unions, lists and dicts)."""
    seen: set[type] = set()
    todo = [root]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for tp in field_types(cls).values():
            stack = [tp]
            while stack:
                t = split_annotated(stack.pop())[0]
                members = union_members(t)
                if len(members) > 1:
                    stack += members
                elif is_config_type(t):
                    todo.append(t)
                else:
                    stack += [a for a in get_args(t) if a is not Ellipsis]
    return seen


def test_every_config_of_every_job_is_exported_under_its_selection_name():
    roots = [recipes.TrainJob.Config, recipes.EvalJob.Config, recipes.PolicyRollout.Config, recipes.ScriptedRollout.Config]
    missing = []
    for cls in set().union(*map(config_classes, roots)):
        exported = getattr(recipes, config_name(cls), None)
        if exported is not cls and getattr(exported, "Config", None) is not cls:
            missing.append(cls.__qualname__)
    assert sorted(missing) == []
    assert set(recipes.__all__) == {n for n in dir(recipes) if not n.startswith("_") and n not in ("annotations",)} - {"LOOP_POOL"}


def test_the_base_recipe_gives_each_codebase_an_env_pool_and_validates():
    config = recipes.base_recipe(
        [DataSource(name="a", codebase="desktop"), DataSource(name="b", codebase="browser"), DataSource(name="c", codebase="desktop")],
        run_dir="runs/x",
    )
    assert config.pool.budget.shares == {"loop": 1.0, "desktop": 2.0, "browser": 2.0}
    assert config.pool.budget.sizes() == {"loop": 1, "desktop": 2, "browser": 2}
    assert validate(config).run_dir == "runs/x"


def test_the_base_recipe_trains_multi_turn_sources_at_a_tenth_of_the_one_turn_rate():
    """Multi-turn tasks unlearn at the one-turn rate (docs/training.md): a source of more than one
    turn sets the RL stage's rate to 1e-4, whichever source it is."""
    one, two = DataSource(name="a", codebase="desktop"), DataSource(name="b", codebase="desktop")
    one.agent.max_turns, two.agent.max_turns = 1, 2
    assert recipes.base_recipe([one]).optim.lr == 1e-3
    assert recipes.base_recipe([one, two]).optim.lr == recipes.base_recipe([two]).optim.lr == 1e-4


def _stale_token_gradient(loss_config) -> float:
    """The gradient on one token sampled a version back that the policy has since made 11.6 times
    likelier (the largest ratio issue 56 saw), with advantage -1, in a step of one token."""
    import math

    import torch

    from vlrl.train.loss import Normaliser

    logp = torch.tensor([-0.1], dtype=torch.float64, requires_grad=True)
    out = loss_config.build()(
        logp, old_logprobs=logp.detach() - math.log(11.6), advantages=torch.tensor([-1.0], dtype=torch.float64),
        loss_mask=torch.tensor([True]), seq_loss_tokens=torch.tensor([1.0], dtype=torch.float64),
        normaliser=Normaliser(tokens=1, sequences=1),
    )  # fmt: skip
    out.loss.backward()
    return abs(logp.grad.item())


def test_stale_tokens_weigh_at_most_the_dual_clip_in_the_base_recipe_and_the_job_s_default():
    """Issue 56: with rollouts ahead of training most tokens are one version old; plain PPO pushes
    a negative-advantage token down with its ratio as weight, unbounded (11.6 here); the dual clip
    gives it no gradient past 3 |A|."""
    from vlrl.job.train_job import TrainJob
    from vlrl.train.loss import RL_DUAL_CLIP, PolicyLoss

    config = recipes.base_recipe([DataSource(name="s", codebase="desktop")])
    assert config.driver.prefetch_batches >= 1 and config.driver.max_staleness >= 1  # data can be stale
    assert _stale_token_gradient(config.loss) <= RL_DUAL_CLIP
    assert _stale_token_gradient(TrainJob.Config().loss) <= RL_DUAL_CLIP
    assert _stale_token_gradient(PolicyLoss.Config(kind="grpo")) == pytest.approx(11.6)  # what it was
