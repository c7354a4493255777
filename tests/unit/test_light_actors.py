"""Actors that hold no model import no torch: a Ray actor's process imports its class's module, and
torch with transformers costs each such process about 5 s of CPU and 0.8 GB (a WeightsKeeper that
imported them through its package measured 5.9 s and 908 MB; 0.5 s and 70 MB without). The check
reads the eager import closure from the source: module-level imports, with every package's
``__init__`` on the way, not those in functions or under TYPE_CHECKING."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OWN = ("vlrl", "encoders", "harnesses")
HEAVY = {"torch", "torchvision", "transformers", "peft", "vllm"}
LIGHT_ACTOR_MODULES = (
    "vlrl.rollout.engine.weights_keeper",  # WeightsKeeper
    "vlrl.pool.loop_host",  # LoopHost
    "vlrl.pool.env_host",  # EnvHost
    "vlrl.store.ray_store",  # the Ray store's shards
    "vlrl.control.grader",  # the grader's runners
)


def source_of(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def eager_imports(tree: ast.AST) -> list[str]:
    """Modules a file imports when it is imported (``from a import b`` names ``a`` and ``a.b``)."""
    found: list[str] = []

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.Import):
                found.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append(node.module)
                found.extend(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block)
            elif isinstance(node, (ast.ClassDef, ast.With)):
                visit(node.body)

    visit(tree.body)
    return found


def import_closure(module: str) -> set[str]:
    """Every top-level package outside the project that importing ``module`` imports."""
    todo, seen, outside = [module], set(), set()
    while todo:
        name = todo.pop()
        parts = name.split(".")
        if parts[0] not in OWN:
            outside.add(parts[0])
            continue
        for i in range(1, len(parts) + 1):  # a module's packages are imported before it
            prefix = ".".join(parts[:i])
            path = source_of(prefix)
            if prefix in seen or path is None:
                continue
            seen.add(prefix)
            todo.extend(eager_imports(ast.parse(path.read_text(), str(path))))
    return outside


@pytest.mark.parametrize("module", LIGHT_ACTOR_MODULES)
def test_an_actor_without_a_model_imports_no_torch(module):
    assert source_of(module) is not None, module
    assert import_closure(module) & HEAVY == set()


def test_the_check_sees_an_import_through_a_package():
    # The embedded engine's module imports torch, and so does anything importing it eagerly.
    assert "torch" in import_closure("vlrl.rollout.engine.embedded")
    assert "torch" in import_closure("vlrl.train.trainer")
