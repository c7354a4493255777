"""The harness settings check before Ray starts: every source's harness is built once with its
settings in a subprocess, and a refused keyword or value fails naming the field and the harness."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from vlrl.config import ConfigError, DataSource, EnvSettings
from vlrl.harness import Harness, register
from vlrl.pool.preflight import RULE, check_harness_settings


def desktop(**env) -> DataSource:
    return DataSource(name="d", codebase="desktop", env=EnvSettings(**env))


def test_settings_the_harness_accepts_pass() -> None:
    check_harness_settings([desktop(width=160, height=120, tasks=["click-target"], params={"distractors": 0})])


def test_a_value_the_constructor_refuses_names_the_field_the_harness_and_the_rule() -> None:
    with pytest.raises(ConfigError) as caught:
        check_harness_settings([desktop(), desktop(width=160, height=120, max_steps=10**9)])
    error = caught.value
    assert error.path == "sources[1].env.max_steps"
    assert error.value == 10**9
    assert "harness 'desktop'" in str(error) and "max_steps" in str(error) and RULE in str(error)


def test_an_unknown_task_family_fails_on_the_tasks_field() -> None:
    with pytest.raises(ConfigError) as caught:
        check_harness_settings([desktop(tasks=["click-targett"])])
    assert caught.value.path == "sources[0].env.tasks"
    assert "click-targett" in str(caught.value)


def test_an_unknown_params_keyword_is_refused_on_its_params_entry() -> None:
    with pytest.raises(ConfigError) as caught:
        check_harness_settings([desktop(params={"distractor": 0})])
    assert caught.value.path == "sources[0].env.params.distractor"
    assert "unexpected keyword argument 'distractor'" in str(caught.value)


def test_a_harness_registered_by_the_callers_module_is_built_in_the_subprocess(tmp_path) -> None:
    """The class travels by value (as recipes' harnesses do to the env hosts); its constructor's
    own error, raised in the subprocess only, comes back whole."""
    marker = tmp_path / "built"

    class Picky(Harness):
        tasks = ("only",)

        def __init__(self, *, width: int = 64, colour: str = "red") -> None:
            if colour not in ("red", "blue"):
                raise ValueError(f"picky harness setting colour={colour!r}; expected 'red' or 'blue'")
            marker.write_text(str(width))

        def reset(self, *, seed=None, options=None):  # pragma: no cover - never reset here
            raise NotImplementedError

        def step(self, action):  # pragma: no cover
            raise NotImplementedError

        def close(self) -> None:
            pass

    register("picky-preflight", Picky, override=True)
    check_harness_settings([DataSource(name="p", codebase="picky-preflight", env=EnvSettings(width=77))])
    assert marker.read_text() == "77"  # built with the settings, in the other process
    with pytest.raises(ConfigError) as caught:
        check_harness_settings([DataSource(name="p", codebase="picky-preflight", env=EnvSettings(params={"colour": "green"}))])
    assert caught.value.path == "sources[0].env.params.colour"
    assert "ValueError: picky harness setting colour='green'" in str(caught.value)
    with pytest.raises(ConfigError) as caught:  # a keyword its signature lacks: refused before building
        check_harness_settings([DataSource(name="p", codebase="picky-preflight", env=EnvSettings(height=90))])
    assert caught.value.path == "sources[0].env.height"
    assert "'colour', 'width'" in caught.value.expected


def test_vlrl_train_fails_on_a_refused_setting_before_ray_starts(tmp_path) -> None:
    recipe = tmp_path / "bad_recipe.py"
    recipe.write_text(textwrap.dedent("""
        from examples.train_click import small

        def recipe():
            config = small()
            config.sources[0].env.params["distractors"] = 99
            config.run_dir = "RUN_DIR"
            return config
    """).replace("RUN_DIR", str(tmp_path / "run")))
    done = subprocess.run(
        [sys.executable, "-m", "vlrl.cli", "train", str(recipe)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr
    assert "config field 'sources[0].env.params.distractors'" in done.stderr
    assert "harness 'desktop'" in done.stderr and RULE in done.stderr
    assert "Traceback" not in done.stderr
    assert "Started a local Ray instance" not in done.stderr + done.stdout
    assert not (tmp_path / "run").exists()  # nothing of the run was made
