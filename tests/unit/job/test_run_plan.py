"""The run plan (``vlrl.job.run_plan``): the main job's settings as they will run, printed by
``vlrl train --print-config --resolved``, and frozen once made, so that no component can change
one afterwards."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from vlrl.cli import main
from vlrl.config.frozen import is_frozen
from vlrl.config.recipe import load_recipe

TRAIN_CLICK = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"


@pytest.mark.parametrize(
    ("overrides", "warm", "rl"),
    [([], "0.01", "0.001"), (["tiny.rate_scale=0.5"], "0.005", "0.0005")],  # the recipe's 1e-2 and 1e-3, scaled
)
def test_print_config_resolved_shows_the_rates_adamw_gets(overrides, warm, rl, capsys, tmp_path):
    sets = [arg for o in [f"run_dir={tmp_path}", *overrides] for arg in ("--set", o)]
    assert main(["train", str(TRAIN_CLICK), "--print-config", "--resolved", *sets]) == 0
    lines = {line.strip() for line in capsys.readouterr().out.splitlines()}
    assert f"warm_start.rank.optim.lr = {warm}  # float (> 0)" in lines
    assert f"rl.rank.optim.lr = {rl}  # float (> 0)" in lines
    assert {"rl.rank.loss.kind = 'grpo'  # 'ppo' | 'grpo' | 'sft'", "warm_start.rank.loss.kind = 'sft'  # 'ppo' | 'grpo' | 'sft'"} <= lines


def test_resolved_needs_print_config(capsys):
    assert main(["train", str(TRAIN_CLICK), "--resolved"]) == 2
    assert "--resolved: only with --print-config" in capsys.readouterr().err


def _configs(value: object, path: str):
    """(dotted path, config) of every config in the tree ``value``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        yield path, value
        for f in dataclasses.fields(value):
            yield from _configs(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _configs(item, f"{path}[{i}]")


def test_no_setting_in_the_plan_can_be_changed(tmp_path):
    plan = load_recipe(str(TRAIN_CLICK), [f"run_dir={tmp_path}"]).plan()
    found = dict(_configs(plan, "plan"))
    assert {"plan.rl.rank.optim", "plan.warm_start.rank.loss", "plan.engine", "plan.layout", "plan.trainer"} <= set(found)
    for path, config in found.items():
        assert is_frozen(config), path
        name = dataclasses.fields(config)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError, match=f"cannot set .*{name}"):
            setattr(config, name, getattr(config, name))
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"cannot set Optimizer.Config.lr: it belongs to a resolved run plan"):
        plan.rl.rank.optim.lr = 1.0


def test_what_ray_ships_to_the_ranks_is_the_plan_still_frozen(tmp_path):
    plan = load_recipe(str(TRAIN_CLICK), [f"run_dir={tmp_path}"]).plan()
    shipped = pickle.loads(pickle.dumps(plan.rl))
    assert shipped == plan.rl and is_frozen(shipped.rank.optim)


def test_a_derived_config_leaves_the_plan_as_it_was(tmp_path):
    plan = load_recipe(str(TRAIN_CLICK), [f"run_dir={tmp_path}"]).plan()
    derived = dataclasses.replace(plan.rl.rank.optim, lr=1.0)
    assert derived.lr == 1.0 and plan.rl.rank.optim.lr == pytest.approx(1e-3) and is_frozen(derived)
