"""The generic plug-in registry: when the contract check runs, clashes, unknown ids, laziness."""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace

import pytest

import vlrl.registry
from vlrl.registry import ContractError, PluginSpec, Registry, RegistryError

PLUGIN = "tests.helpers.registry_plugin"


def counting_registry(*, broken: set[str] = frozenset()) -> tuple[Registry, list[str]]:
    """A registry whose checker logs each id it checks and refuses the ids in ``broken``."""
    checked: list[str] = []

    def checker(spec: PluginSpec, target):
        checked.append(spec.id)
        if spec.id in broken:
            raise ContractError("no broken ids", f"{spec.id} is on the broken list")

    return Registry("widget", "vlrl.tests-widgets", checker), checked


def widget(*, size: int = 1) -> dict:
    return {"widget": size}


def test_a_callable_is_checked_at_registration_exactly_once():
    registry, checked = counting_registry()
    registry.register("w", widget)
    assert checked == ["w"]
    assert registry.make("w", size=3) == {"widget": 3}
    registry.resolve("w")
    assert checked == ["w"]


def test_a_path_is_loaded_and_checked_on_first_make_exactly_once():
    sys.modules.pop(PLUGIN, None)
    registry, checked = counting_registry()
    spec = registry.register("w", f"{PLUGIN}:make_widget")
    assert (checked, PLUGIN in sys.modules) == ([], False)
    assert spec.entry_point == f"{PLUGIN}:make_widget" and spec.version is None and spec.kind == "widget"
    assert registry.make("w", size=2) == {"widget": 2}
    assert registry.make("w") == {"widget": 1}
    assert checked == ["w"] and PLUGIN in sys.modules


def test_concurrent_first_resolves_check_once():
    registry, checked = counting_registry()
    registry.register("w", f"{PLUGIN}:make_widget")
    threads = [threading.Thread(target=registry.resolve, args=("w",)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert checked == ["w"]


def test_a_broken_plugin_names_kind_id_and_rule():
    registry, _ = counting_registry(broken={"bad", "bad-path"})
    with pytest.raises(RegistryError, match="widget 'bad': rule 'no broken ids': bad is on the broken list"):
        registry.register("bad", widget)
    assert registry.registered() == []
    registry.register("bad-path", f"{PLUGIN}:make_widget")
    with pytest.raises(RegistryError, match="widget 'bad-path': rule 'no broken ids'"):
        registry.make("bad-path")
    registry.register("not-callable", f"{PLUGIN}:NOT_CALLABLE")
    with pytest.raises(RegistryError, match="widget 'not-callable': rule 'callable': tests.helpers.registry_plugin:NOT_CALLABLE is 3"):
        registry.resolve("not-callable")


def test_registering_over_an_id_needs_override():
    registry, checked = counting_registry()
    registry.register("w", widget)
    registry.register("w", widget)  # the same plug-in again: no clash, no second check
    assert checked == ["w"]
    with pytest.raises(RegistryError, match="widget 'w': already registered as <function widget.*override=True"):
        registry.register("w", f"{PLUGIN}:make_widget")
    registry.register("w", f"{PLUGIN}:make_widget", override=True)
    assert registry.spec("w").entry_point == f"{PLUGIN}:make_widget"
    assert registry.make("w") == {"widget": 1} and checked == ["w", "w"]


def test_unknown_ids_list_the_known_ones_and_bad_paths_are_refused():
    registry, _ = counting_registry()
    registry.register("b", widget)
    registry.register("a", f"{PLUGIN}:make_widget")
    with pytest.raises(RegistryError, match=r"widget 'c': not registered; known: \['a', 'b'\]"):
        registry.make("c")
    with pytest.raises(RegistryError, match="entry point 'tests.helpers.registry_plugin'; expected 'module:attribute'"):
        registry.register("d", PLUGIN)
    with pytest.raises(RegistryError, match="id must be a non-empty string"):
        registry.register("", widget)
    registry.register("gone", "tests.no_such_module:thing")
    with pytest.raises(RegistryError, match="widget 'gone': cannot load tests.no_such_module:thing"):
        registry.resolve("gone")


def test_entry_points_are_lazy_versioned_and_protected(monkeypatch):
    installed = [SimpleNamespace(name="ep", value=f"{PLUGIN}:make_widget", dist=SimpleNamespace(version="1.2.3"))]
    monkeypatch.setattr(vlrl.registry, "entry_points", lambda group: installed if group == "vlrl.tests-widgets" else [])
    sys.modules.pop(PLUGIN, None)
    registry, checked = counting_registry()
    assert registry.registered() == ["ep"]
    assert registry.spec("ep").version == "1.2.3"
    assert (checked, PLUGIN in sys.modules) == ([], False)
    with pytest.raises(RegistryError, match="widget 'ep': already registered"):
        registry.register("ep", widget)
    assert registry.make("ep", size=5) == {"widget": 5} and checked == ["ep"]


def test_the_real_kinds_share_the_shape():
    from importlib.metadata import version

    from encoders.registry import REGISTRY as ENCODERS
    from vlrl.harness.registry import REGISTRY as HARNESSES

    assert (HARNESSES.kind, HARNESSES.group, ENCODERS.kind, ENCODERS.group) == (
        "harness", vlrl.registry.HARNESSES, "encoder", vlrl.registry.ENCODERS,
    )  # fmt: skip
    assert HARNESSES.spec("desktop").version == version("vlrl")  # installed by this package's entry point
    assert ENCODERS.spec("qwen2vl").version is None  # built in by path
