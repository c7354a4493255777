"""Where a user finds the settings of ``vlrl train``: the common ones at most two dots from the
top, an old path refused with its new one named, and ``--set`` reaching dict keys and taking a
list in brackets with bare words."""

from __future__ import annotations

import pytest

from vlrl.config import ConfigError, apply_overrides
from vlrl.config.moved import MOVED, moved
from vlrl.control.step_credit import StepCredit
from vlrl.job.train_job import TrainJob
from vlrl.recipes import DataSource, EnvSettings, WarmStart


def _job() -> TrainJob.Config:
    source = DataSource(env=EnvSettings(tasks=["click-target"], params={"distractors": 0}))
    return TrainJob.Config(sources=[source], warm_start=WarmStart())


def _get(cfg, path: str):
    for part in path.replace("[", ".[").split("."):
        cfg = cfg[int(part[1:-1])] if part.startswith("[") else getattr(cfg, part)
    return cfg


@pytest.mark.parametrize(
    ("override", "path", "value"),
    [
        ("optim.lr=1e-4", "optim.lr", 1e-4),
        ("optim.schedule=cosine", "optim.schedule", "cosine"),
        ("optim.min_lr_ratio=0.05", "optim.min_lr_ratio", 0.05),
        ("steps=40", "steps", 40),
        ("driver.groups_per_batch=4", "driver.groups_per_batch", 4),
        ("advantage.estimator=rloo", "advantage.estimator", "rloo"),
        ("advantage.drop_zero_advantage=false", "advantage.drop_zero_advantage", False),
        ("advantage.sampler.include_min=true", "advantage.sampler.include_min", True),
        ("advantage.step_credit=StepCredit", "advantage.step_credit", StepCredit()),
        ("sources[0].group_size=4", "sources[0].group_size", 4),
        ("layout.tp=2", "layout.tp", 2),
        ("loss.kind=ppo", "loss.kind", "ppo"),
        ("loss.clip_high=0.2", "loss.clip_high", 0.2),
        ("loss.tis_cap=2.0", "loss.tis_cap", 2.0),
        ("micro_batches.max_tokens_per_micro_batch=2048", "micro_batches.max_tokens_per_micro_batch", 2048),
        ("engine.max_batch=8", "engine.max_batch", 8),
        ("sources[0].agent.temperature=0.7", "sources[0].agent.temperature", 0.7),
        ("trainer.dtype=bfloat16", "trainer.dtype", "bfloat16"),
        ("warm_start.lr=1e-2", "warm_start.lr", 1e-2),
        ("warm_start.schedule=cosine", "warm_start.schedule", "cosine"),
        ("eval.every=5", "eval.every", 5),
    ],
)
def test_common_settings_sit_at_most_two_dots_deep(override, path, value):
    assert path.count(".") <= 2
    assert _get(apply_overrides(_job(), [override]), path) == value


def test_the_warm_start_and_the_rl_stage_spell_the_schedule_alike():
    from vlrl.config import field_types

    assert field_types(WarmStart)["schedule"] == field_types(type(_job().optim))["schedule"]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("trainer.trainer.lr=1e-4", "optim.lr"),
        ("trainer.trainer.loss.kind=ppo", "loss.kind"),
        ("trainer.trainer.micro_batches.cost.linear=2", "micro_batches.cost.linear"),
        ("trainer.trainer.dtype=bfloat16", "trainer.dtype"),
        ("trainer.layout.dp=2", "layout.dp"),
        ("warm_start.lr_schedule=cosine", "warm_start.schedule"),
        ("trainer.trainer.lr_decay_steps=50", "optim.schedule"),
        ("driver.hook.mode=opd", "advantage.mode"),
        ("driver.hook.sampler.include_min=true", "advantage.sampler.include_min"),
    ],
)
def test_an_old_path_fails_naming_the_new_one(old, new):
    with pytest.raises(ConfigError) as error:
        apply_overrides(_job(), [old])
    assert error.value.path == old.partition("=")[0]
    assert f"its new path {new!r}" in str(error.value)
    if new != "optim.schedule":
        assert f"use --set {new}={old.partition('=')[2]}" in str(error.value)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_moved_path_leads_somewhere_that_exists(old):
    new, _ = moved(old)
    _get(_job(), new)  # AttributeError if the table points nowhere
    with pytest.raises(ConfigError, match=f"its new path '{new}'"):
        apply_overrides(_job(), [f"{old}=1"])


@pytest.mark.parametrize(
    ("read", "new"),
    [
        (lambda c: c.trainer.trainer.lr, "config.trainer.trainer has moved to config.trainer (its fields moved up: the optimizer's to optim"),
        (lambda c: c.trainer.layout, "config.trainer.layout has moved to config.layout"),
        (lambda c: c.driver.hook.sampler, "config.driver.hook has moved to config.advantage"),
    ],
)
def test_recipe_code_reading_an_old_path_is_told_the_new_one(read, new):
    with pytest.raises(AttributeError) as error:
        read(_job())
    assert new in str(error.value)
    with pytest.raises(AttributeError, match=r"'TrainerGroup.Config' object has no attribute 'nothing'"):
        _job().trainer.nothing
    with pytest.raises(AttributeError, match=r"'Driver.Config' object has no attribute 'nothing'"):
        _job().driver.nothing


@pytest.mark.parametrize("old", sorted(p for p in MOVED if moved(p.rpartition(".")[0]) is None))
def test_recipe_code_reading_or_setting_any_moved_path_is_told_the_new_one(old):
    # The same table as --set: `config.warm_start.lr_schedule = "cosine"` in a two-day-old recipe
    # raised a bare "'WarmStart' object has no attribute 'lr_schedule'" (issue 52).
    new, entry = moved(old)
    *parents, name = old.split(".")
    said = f"config.{old} has moved to config.{new}"
    with pytest.raises(AttributeError) as read:
        getattr(_get(_job(), ".".join(parents)), name)
    with pytest.raises(AttributeError) as written:
        setattr(_get(_job(), ".".join(parents)), name, 1)
    for error in (read, written):
        assert said in str(error.value) and entry.note in str(error.value), error.value


def test_a_moved_section_still_sets_its_fields_and_refuses_other_names_as_python_does():
    config = _job()
    config.warm_start.schedule = "cosine"
    assert config.warm_start.schedule == "cosine"
    with pytest.raises(AttributeError, match=r"^'WarmStart' object has no attribute 'nothing'$"):
        config.warm_start.nothing = 1


def test_a_mistyped_path_is_not_taken_for_a_moved_one():
    with pytest.raises(ConfigError, match=r"unknown key 'lrr'.*did you mean 'optim.lr'"):
        apply_overrides(_job(), ["optim.lrr=1"])


@pytest.mark.parametrize(
    ("override", "value"),
    [
        ("sources[0].env.params.jitter=0", 0),
        ("sources[0].env.params.jitter=0.5", 0.5),
        ("sources[0].env.params.jitter=true", True),
        ("sources[0].env.params.jitter=wide", "wide"),
    ],
)
def test_set_reaches_a_dict_key_and_parses_its_value(override, value):
    config = apply_overrides(_job(), [override])
    params = config.sources[0].env.params
    assert params == {"distractors": 0, "jitter": value} and type(params["jitter"]) is type(value)


def test_set_changes_an_existing_dict_key_and_a_typed_dicts_value():
    config = apply_overrides(_job(), ["sources[0].env.params.distractors=3", "pool.budget.shares.desktop=3"])
    assert config.sources[0].env.params == {"distractors": 3}
    assert config.pool.budget.shares["desktop"] == 3.0 and type(config.pool.budget.shares["desktop"]) is float


def test_a_bad_dict_value_names_the_key():
    with pytest.raises(ConfigError, match=r"config field 'pool.budget.shares\['desktop'\]'"):
        apply_overrides(_job(), ["pool.budget.shares.desktop=-1"])


@pytest.mark.parametrize(
    ("override", "tasks"),
    [
        ("sources[0].env.tasks=[distinct]", ["distinct"]),
        ("sources[0].env.tasks=[click-target, distinct]", ["click-target", "distinct"]),
        ('sources[0].env.tasks=["click-target", "distinct"]', ["click-target", "distinct"]),
        ("sources[0].env.tasks=click-target,distinct", ["click-target", "distinct"]),
        ("sources[0].env.tasks=[]", []),
        ("sources[0].env.tasks=none", None),
    ],
)
def test_a_list_is_taken_in_brackets_with_bare_words(override, tasks):
    assert apply_overrides(_job(), [override]).sources[0].env.tasks == tasks


def test_a_dict_is_taken_in_braces_with_bare_words():
    config = apply_overrides(_job(), ["sources[0].env.params={jitter: 0, theme: dark}"])
    assert config.sources[0].env.params == {"jitter": 0, "theme": "dark"}


def test_configuration_doc_quotes_the_error_recipe_code_gets():
    from pathlib import Path

    with pytest.raises(AttributeError) as error:
        _job().warm_start.lr_schedule = "cosine"
    doc = (Path(__file__).parents[3] / "docs" / "configuration.md").read_text()
    assert f"AttributeError: {error.value}\n" in doc
