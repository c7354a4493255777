"""The trainer group's config: one ``Layout`` describes its ranks, set and checked like any config;
the policy's checkpoint is set once, on the rollout side, and no component config repeats it."""

from __future__ import annotations

import dataclasses

import pytest

from vlrl.config import ConfigError, apply_overrides, field_types, is_config, validate
from vlrl.job.train_job import TrainJob
from vlrl.pack import Layout
from vlrl.rollout.engine import EmbeddedEngine, VLLMEngine
from vlrl.rollout.policy_rollout import PolicyRollout
from vlrl.rollout.server import OpenAIServer
from vlrl.train.trainer import Trainer
from vlrl.train.trainer_group import TrainerGroup


def test_the_group_has_exactly_one_layout_and_no_mesh_fields_of_its_own():
    types = field_types(TrainerGroup.Config)
    assert [name for name, tp in types.items() if tp is Layout] == ["layout"]
    assert not {"dp", "cp", "tp", "sequence_parallel", "world_size"} & set(types)
    assert TrainerGroup.Config().layout == Layout(1, 1, 1)


def test_overrides_set_the_layout_field_by_field():
    config = apply_overrides(
        TrainJob.Config(), ["trainer.layout.dp=2", "trainer.layout.cp=2", "trainer.layout.tp=2"]
    )
    assert config.trainer.layout == Layout(dp=2, cp=2, tp=2)
    assert config.trainer.layout.world_size == 8
    assert TrainJob.Config().trainer.layout == Layout(1)  # the default tree is not touched


@pytest.mark.parametrize(
    ("overrides", "path", "expected"),
    [
        (["trainer.layout.cp=0"], "trainer.layout.cp", ">= 1"),
        (["trainer.layout.dp=1.5"], "trainer.layout.dp", "an integer"),
        (["trainer.layout.tp=2", "trainer.layout.sequence_parallel=false"], "trainer.layout.sequence_parallel",
         "True, since tp = 2 > 1"),
        (["trainer.dp=2"], "trainer.dp", "a field of TrainerGroup.Config: layout"),
    ],
)  # fmt: skip
def test_a_bad_layout_is_refused_at_config_time_naming_the_field(overrides, path, expected):
    with pytest.raises(ConfigError) as error:
        apply_overrides(TrainJob.Config(), overrides)
    assert error.value.path == path and expected in str(error.value)


def test_a_bad_layout_built_in_a_recipe_is_refused_where_it_is_built():
    with pytest.raises(ConfigError, match=r"'Layout.tp': got 0"):
        TrainerGroup.Config(layout=Layout(1, 1, 0))
    with pytest.raises(ConfigError, match=r"'layout.sequence_parallel'"):
        validate(TrainerGroup.Config(layout=Layout(1, 1, 2, sequence_parallel=False)))


@pytest.mark.parametrize("config", [Trainer.Config, EmbeddedEngine.Config, VLLMEngine.Config, TrainerGroup.Config])
def test_component_configs_carry_no_model_path(config):
    assert "model_path" not in {f.name for f in dataclasses.fields(config)}


def _model_paths(cfg, path: str = "") -> list[str]:
    """Dotted paths of every ``model_path`` field in a config tree."""
    found = []
    for f in dataclasses.fields(cfg):
        value, here = getattr(cfg, f.name), f"{path}.{f.name}".lstrip(".")
        if f.name == "model_path":
            found.append(here)
        for item in value if isinstance(value, list) else [value]:
            if is_config(item):
                found += _model_paths(item, here)
    return found


@pytest.mark.parametrize("config", [TrainJob.Config, PolicyRollout.Config])
def test_the_policy_path_is_set_in_one_place(config):
    assert _model_paths(config()) == ["model_path"]


def test_the_server_holds_the_path_it_serves():
    server = OpenAIServer.Config(model_path="ckpt", engine=EmbeddedEngine.Config())
    assert _model_paths(server) == ["model_path"]
