"""The trainer's settings in ``vlrl train``: one ``Layout`` at ``layout`` describes the ranks, set
and checked like any config; the optimizer, loss and micro-batching are sections of their own;
the policy's checkpoint is set once, on the rollout side, and no component config repeats it."""

from __future__ import annotations

import dataclasses

import pytest

from vlrl.config import ConfigError, apply_overrides, field_types, is_config, validate
from vlrl.job.policy_rollout import PolicyRollout
from vlrl.job.train_job import TrainJob
from vlrl.pack import Layout
from vlrl.rollout.engine import EmbeddedEngine, VLLMEngine
from vlrl.rollout.server import OpenAIServer
from vlrl.train.lora import LoRA
from vlrl.train.loss import PolicyLoss
from vlrl.train.optimizer import Optimizer
from vlrl.train.trainer import Trainer
from vlrl.train.trainer_group import TrainerGroup


def test_the_job_has_exactly_one_layout_and_no_mesh_fields_elsewhere():
    types = field_types(TrainJob.Config)
    assert [name for name, tp in types.items() if tp is Layout] == ["layout"]
    for config in (TrainerGroup.Config, Trainer.Config):
        assert not {"layout", "dp", "cp", "tp", "sequence_parallel", "world_size"} & set(field_types(config))
    assert TrainJob.Config().layout == Layout(1, 1, 1)


def test_overrides_set_the_layout_field_by_field():
    config = apply_overrides(TrainJob.Config(), ["layout.dp=2", "layout.cp=2", "layout.tp=2"])
    assert config.layout == Layout(dp=2, cp=2, tp=2)
    assert config.layout.world_size == 8
    assert TrainJob.Config().layout == Layout(1)  # the default tree is not touched


@pytest.mark.parametrize(
    ("overrides", "path", "expected"),
    [
        (["layout.cp=0"], "layout.cp", ">= 1"),
        (["layout.dp=1.5"], "layout.dp", "an integer"),
        (["layout.tp=2", "layout.sequence_parallel=false"], "layout.sequence_parallel", "True, since tp = 2 > 1"),
        (["trainer.dp=2"], "trainer.dp", "a field of TrainerGroup.Config"),
        (["layout.dp=2", "layout.ep=4"], "layout.ep", "a divisor of dp x cp = 2"),
        (["layout.dp=3", "layout.ep=3", "tiny.family=qwen3_vl_moe"], "layout.ep", "a divisor of the model's 4 experts"),
        (["layout.dp=2", "layout.ep=2", "tiny.family=qwen3_vl"], "layout.ep", "1 for the qwen3_vl family"),
        (["trainer.layout.dp=2"], "trainer.layout.dp", "its new path 'layout.dp'"),
    ],
)
def test_a_bad_layout_is_refused_at_config_time_naming_the_field(overrides, path, expected):
    with pytest.raises(ConfigError) as error:
        apply_overrides(TrainJob.Config(), overrides)
    assert error.value.path == path and expected in str(error.value)


def test_a_bad_layout_built_in_a_recipe_is_refused_where_it_is_built():
    with pytest.raises(ConfigError, match=r"'Layout.tp': got 0"):
        Layout(1, 1, 0)


def test_the_ranks_run_the_jobs_sections_and_their_own_settings(tmp_path):
    """The run plan joins the ``trainer`` section's model fields with the job's sections into each
    rank's ``Trainer.Config``; the fields the section lacks are exactly those sections."""
    group = TrainerGroup.Config(dtype="float64", encode_chunk_tokens=64, cpus_per_worker=0.5)
    optim, loss = Optimizer.Config(lr=3e-4, schedule="cosine"), PolicyLoss.Config(kind="sft", mismatch_warn_lag0=0.01)
    config = TrainJob.Config(trainer=group, optim=optim, loss=loss, lora=LoRA.Config(rank=4), run_dir=str(tmp_path))
    rank = validate(config).plan().rl.rank
    assert (rank.dtype, rank.encode_chunk_tokens, rank.optim, rank.loss, rank.lora) == ("float64", 64, optim, loss, config.lora)
    assert {f.name for f in dataclasses.fields(Trainer.Config)} - {f.name for f in dataclasses.fields(TrainerGroup.Config)} == {
        "optim", "loss", "micro_batches", "lora"}  # fmt: skip


def test_a_group_refuses_a_stage_whose_model_fields_are_not_its_own():
    stage = TrainerGroup.Stage(rank=Trainer.Config(dtype="float64"), steps=1)
    with pytest.raises(ValueError, match=r"differs from this section in \['dtype'\]"):
        TrainerGroup.Config().build(stage, model_path="unused", store_config=None, layout=Layout())


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
