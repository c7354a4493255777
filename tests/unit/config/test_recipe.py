import sys
import textwrap
from pathlib import Path

import pytest

from vlrl.config import ConfigError, RecipeError, load_recipe

RECIPE = Path(__file__).parents[2] / "helpers" / "example_recipe.py"


def test_the_default_function_is_recipe():
    cfg = load_recipe(str(RECIPE))
    assert type(cfg).__qualname__ == "ReportJob.Config"
    assert cfg.output == "report.txt" and type(cfg.writer).__qualname__ == "TextWriter.Config"
    assert repr(load_recipe(f"{RECIPE}:")) == repr(cfg)  # each load has its own classes


def test_a_variant_is_a_function_over_the_base():
    cfg = load_recipe(f"{RECIPE}:json_report")
    assert type(cfg.writer).__qualname__ == "JsonWriter.Config" and cfg.writer.indent == 2
    assert cfg.items == load_recipe(str(RECIPE)).items


def test_overrides_are_applied_and_validated():
    cfg = load_recipe(str(RECIPE), ["repeat=3", "writer=JsonWriter", "writer.indent=4"])
    assert (cfg.repeat, cfg.writer.indent) == (3, 4)
    message = r"^config field 'writer.indent': got -1 \(int\); expected an integer >= 0 or None$"
    with pytest.raises(ConfigError, match=message):
        load_recipe(str(RECIPE), ["writer=JsonWriter", "writer.indent=-1"])


def test_each_load_is_a_fresh_module():
    first, second = load_recipe(str(RECIPE)), load_recipe(str(RECIPE))
    assert type(first) is not type(second)


def test_a_missing_file():
    with pytest.raises(RecipeError, match=r"^recipe file not found: no/such/recipe.py$"):
        load_recipe("no/such/recipe.py:small")


def test_not_a_python_file(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("steps: 1\n")
    with pytest.raises(RecipeError, match=r"recipe\.yaml: expected a Python file \(\.py\)$"):
        load_recipe(str(path))


def test_a_missing_function_lists_the_functions_defined_there():
    with pytest.raises(RecipeError) as caught:
        load_recipe(f"{RECIPE}:jsonreport")
    assert str(caught.value) == (
        f"recipe {RECIPE}: no function 'jsonreport'; functions defined there: "
        "json_report, not_a_config, notes_only, recipe, writer_only"
    )


def test_a_function_that_returns_no_config():
    with pytest.raises(RecipeError) as caught:
        load_recipe(f"{RECIPE}:not_a_config")
    assert str(caught.value) == (
        f"recipe {RECIPE}:not_a_config: returned {{'output': 'report.txt'}} (dict); "
        "expected a config (a dataclass instance)"
    )


def test_a_recipe_outside_any_package_with_string_annotations(tmp_path):
    path = tmp_path / "my run.py"
    path.write_text(
        textwrap.dedent(
            '''
            from __future__ import annotations

            from dataclasses import dataclass, field
            from typing import Annotated

            from vlrl.config import Ge


            class Inner:
                @dataclass(kw_only=True, slots=True)
                class Config:
                    size: Annotated[int, Ge(1)] = 1
                    """How big."""


            @dataclass(kw_only=True, slots=True)
            class Top:
                inner: Inner.Config = field(default_factory=Inner.Config)
                """The inner part."""


            def _helper():
                return Top()


            def recipe():
                return _helper()
            '''
        )
    )
    assert load_recipe(str(path), ["inner.size=3"]).inner.size == 3
    with pytest.raises(ConfigError, match="'inner.size': got 0"):
        load_recipe(str(path), ["inner.size=0"])
    with pytest.raises(RecipeError, match="functions defined there: recipe$"):
        load_recipe(f"{path}:other")


def test_an_error_inside_the_recipe_propagates_unchanged(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('recipe bug')\n")
    with pytest.raises(RuntimeError, match="recipe bug"):
        load_recipe(str(path))
    assert not [name for name in sys.modules if name.endswith("_broken")]  # no half-imported module left


def test_what_a_recipe_defines_unpickles_where_the_recipe_cannot_be_imported(tmp_path):
    from ray import cloudpickle

    path = tmp_path / "plugin_recipe.py"
    path.write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass

            class Plugin:
                def answer(self):
                    return 42

            @dataclass
            class Top:
                plugin: type = Plugin

            def recipe():
                return Top()
            """
        )
    )
    config = load_recipe(str(path))
    payload = cloudpickle.dumps(config.plugin)
    name = config.plugin.__module__
    module = sys.modules.pop(name)  # a Ray worker has no such module
    try:
        assert cloudpickle.loads(payload)().answer() == 42
    finally:
        sys.modules[name] = module
