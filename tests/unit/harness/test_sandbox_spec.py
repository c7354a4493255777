"""What a harness asks of a sandbox: needed capabilities refused by name, wanted ones warned about
once, limits checked at the edge."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import pytest

from vlrl.harness.sandbox import CAPABILITY_NAMES, Capabilities, Limits, SandboxUnavailable, require, sandbox_setting
from vlrl.harness.sandbox.host import NO_CAPABILITIES

FULL = Capabilities(**dict.fromkeys(CAPABILITY_NAMES, True))


@dataclass
class Declared:
    capabilities: Capabilities


def test_a_missing_needed_capability_is_refused_by_name_with_the_way_out():
    box = Declared(replace(FULL, isolates_network=False))
    with pytest.raises(SandboxUnavailable, match=r"needs a sandbox that isolates_network; .*sandbox='none'"):
        require("xdesktop", box, ["isolates_files", "isolates_network"])
    require("xdesktop", Declared(FULL), ["isolates_files", "isolates_network"])


def test_the_unsandboxed_backend_declares_nothing():
    assert Declared(NO_CAPABILITIES).capabilities.missing(CAPABILITY_NAMES) == list(CAPABILITY_NAMES)


def test_a_missing_wanted_capability_warns_once(caplog):
    box = Declared(replace(FULL, limits_memory=False, limits_disk=False))
    with caplog.at_level(logging.WARNING, logger="vlrl"):
        require("unit-harness", box, ["isolates_files"], ["limits_memory", "limits_processes", "limits_disk"])
        require("unit-harness", box, ["isolates_files"], ["limits_memory", "limits_processes", "limits_disk"])
    warnings = [r.getMessage() for r in caplog.records if "unit-harness" in r.getMessage()]
    assert len(warnings) == 1 and "does not limits_memory, limits_disk" in warnings[0]


@pytest.mark.parametrize(("field", "value"), [("memory_mb", 10), ("processes", 2), ("disk_mb", 0), ("memory_mb", True)])
def test_limits_name_the_bad_field(field, value):
    with pytest.raises(ValueError, match=rf"sandbox limit {field}={value!r}; expected an int"):
        Limits(**{field: value})


def test_the_sandbox_setting_names_the_kinds():
    assert sandbox_setting("browser", "none") == "none"
    with pytest.raises(ValueError, match=r"browser harness setting sandbox='docker'; expected one of \['bubblewrap', 'none'\]"):
        sandbox_setting("browser", "docker")
