"""Every recipe in examples/ loads and validates: each public function of an example that takes
no argument and returns a config (a variant such as ``small`` or ``mixed`` included), so a moved
or renamed setting cannot leave an example behind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from vlrl.config import is_config, load_recipe

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _recipes() -> list[str]:
    specs = []
    for path in sorted(EXAMPLES.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            takes_nothing = isinstance(node, ast.FunctionDef) and not (node.args.args or node.args.kwonlyargs)
            returns_config = takes_nothing and node.returns is not None and "Config" in ast.unparse(node.returns)
            if returns_config and not node.name.startswith("_"):
                specs.append(f"{path.name}:{node.name}")
    return specs


def test_the_examples_have_recipes():
    assert {"train_click.py:recipe", "train_click.py:small", "train_select_menu.py:long_warm_start"} <= set(_recipes())


@pytest.mark.parametrize("spec", _recipes())
def test_every_recipe_loads_and_validates(spec):
    assert is_config(load_recipe(str(EXAMPLES / spec)))
