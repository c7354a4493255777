"""The package import graph: arrows point down the layers of ``docs/architecture.md``, never up
or sideways, so there is no cycle. Every import counts, in functions and under TYPE_CHECKING too:
a lazy import is still a dependency."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS = (
    ("vlrl.errors",),
    ("vlrl", "vlrl.atomic", "vlrl.records", "vlrl.registry"),
    ("vlrl.config",),
    ("vlrl.store",),
    ("vlrl.mm",),
    ("vlrl.harness", "vlrl.pack", "encoders"),
    ("vlrl.gym",),
    ("vlrl.models", "vlrl.pool", "harnesses"),
    ("vlrl.rollout", "vlrl.control", "vlrl.train"),
    ("vlrl.job",),
    ("vlrl.recipes",),
    ("vlrl.bench",),
    ("vlrl.cli",),
)
"""Bottom first. A package may import only packages of lower layers."""

LAYER_OF = {node: i for i, layer in enumerate(LAYERS) for node in layer}


def node_of(module: str) -> str | None:
    """The graph node of a module: ``vlrl.<package>``, the ``vlrl`` root, or a plug-in package."""
    parts = module.split(".")
    if parts[0] in ("encoders", "harnesses"):
        return parts[0]
    if parts[0] != "vlrl":
        return None
    return "vlrl" if len(parts) == 1 else f"vlrl.{parts[1]}"


def import_graph(root: Path = ROOT) -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> the files whose imports make that arrow."""
    arrows: dict[tuple[str, str], list[str]] = defaultdict(list)
    for top in ("vlrl", "encoders", "harnesses"):
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            parts = rel.with_suffix("").parts
            source = node_of(".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) == 2 else parts))
            for node in ast.walk(ast.parse(path.read_text(), str(rel))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    target = node_of(name)
                    if target is not None and target != source:
                        arrows[(source, target)].append(f"{rel}:{node.lineno}")
    return arrows


def bad_arrows(arrows: dict[tuple[str, str], list[str]]) -> list[str]:
    """Arrows that point up or sideways, or touch a package the layers do not place."""
    bad = []
    for (source, target), where in sorted(arrows.items()):
        if source not in LAYER_OF or target not in LAYER_OF:
            bad.append(f"{source} -> {target}: not placed in LAYERS ({where[0]})")
        elif LAYER_OF[target] >= LAYER_OF[source]:
            bad.append(f"{source} -> {target} ({', '.join(where[:3])})")
    return bad


def test_every_import_points_down_a_layer():
    arrows = import_graph()
    assert arrows, "no imports found: the walk is broken"
    assert bad_arrows(arrows) == []


def test_every_package_is_placed_in_a_layer():
    packages = {f"vlrl.{p.name}" for p in (ROOT / "vlrl").iterdir() if (p / "__init__.py").exists()}
    modules = {f"vlrl.{p.stem}" for p in (ROOT / "vlrl").glob("*.py") if p.stem != "__init__"}
    assert packages | modules <= set(LAYER_OF)


def test_records_import_nothing_else_of_vlrl():
    arrows = import_graph()
    assert [t for (s, t) in arrows if s in ("vlrl.records", "vlrl.registry") and t != "vlrl.errors"] == []


@pytest.mark.parametrize(
    ("source", "target", "file"),
    [("vlrl.mm", "vlrl.pool", "vlrl/mm/up.py"), ("vlrl.control", "vlrl.rollout", "vlrl/control/side.py")],
)
def test_an_arrow_up_or_sideways_is_reported(tmp_path, source, target, file):
    for top in ("vlrl", "encoders", "harnesses"):
        (tmp_path / top).mkdir()
    path = tmp_path / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"def f():\n    from {target} import x\n")
    assert bad_arrows(import_graph(tmp_path)) == [f"{source} -> {target} ({file}:2)"]


def test_the_architecture_doc_draws_the_same_layers():
    doc = (ROOT / "docs" / "architecture.md").read_text()
    drawn = re.search(r"<!-- layers -->\n```\n(.*?)```", doc, re.S)
    assert drawn, "docs/architecture.md lost its layer diagram (the block after <!-- layers -->)"
    rows = [line.split(":", 1)[1].split() for line in drawn.group(1).strip().splitlines()]
    names = tuple(tuple(n if n in ("encoders", "harnesses", "vlrl") else f"vlrl.{n}" for n in row) for row in rows)
    assert names == tuple(reversed(LAYERS))


KNOWN_MODULE_CYCLES = (
    {"vlrl.pack", "vlrl.pack.packer"},
    {"vlrl.job.rl_step", "vlrl.job.run_plan", "vlrl.job.session", "vlrl.job.train_job", "vlrl.job.train_refusals"},
    {"vlrl.rollout.agent_loop", "vlrl.rollout.branching", "vlrl.rollout.player"},
    {"vlrl.rollout.engine.core", "vlrl.rollout.engine.embedded"},
    {"vlrl.harness.sandbox", "vlrl.harness.sandbox.bubblewrap"},
    {"harnesses.browser", "harnesses.browser.harness"},
)
"""Module circles inside a package that are older than this check: each may shrink or go, none
may grow, and no other may appear (``train.lora`` <-> ``train.trainer`` and ``models.registry``
<-> ``models.tiny`` went)."""


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of vlrl and the plug-in packages it imports (lazy imports and
    ``TYPE_CHECKING`` ones included; ``from p import name`` counts ``p.name`` when that is a module)."""
    files = {}
    for top in ("vlrl", "encoders", "harnesses"):
        for path in sorted((root / top).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def module_of(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            graph[module] |= {found for found in map(module_of, names) if found not in (None, module)}
    return graph


def module_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected sets of two or more modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            members = set()
            while not members or member != node:
                member = stack.pop()
                members.add(member)
            if len(members) > 1:
                cycles.append(members)

    for node in list(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_new_module_circle():
    new = [cycle for cycle in module_cycles(module_graph()) if not any(cycle <= known for known in KNOWN_MODULE_CYCLES)]
    assert new == []


def test_a_module_circle_is_found(tmp_path):
    for top in ("vlrl", "encoders", "harnesses"):
        (tmp_path / top).mkdir()
    (tmp_path / "vlrl" / "train").mkdir()
    (tmp_path / "vlrl" / "train" / "lora.py").write_text("def f():\n    from vlrl.train.trainer import HF_FILES\n")
    (tmp_path / "vlrl" / "train" / "trainer.py").write_text("from vlrl.train import lora\n")
    assert module_cycles(module_graph(tmp_path)) == [{"vlrl.train.lora", "vlrl.train.trainer"}]


def test_nothing_outside_tests_imports_tests():
    """Scripts, examples and the packages run without the test tree (an installed vlrl has none)."""
    found = []
    for top in ("vlrl", "encoders", "harnesses", "scripts", "examples"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                found += [f"{path.relative_to(ROOT)}:{node.lineno}" for n in names if n.split(".")[0] == "tests"]
    assert found == []
