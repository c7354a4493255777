"""Settings are checked before any browser starts, and errors name the field."""

from __future__ import annotations

import pytest

from harnesses.miniwob import DEFAULT_TASKS, TASK_NAMES, MiniWoBHarness
from vlrl.config import ConfigError


def test_defaults_are_known_tasks_the_oracle_solves():
    from harnesses.miniwob.oracle import POLICIES

    assert len(DEFAULT_TASKS) >= 5
    assert set(DEFAULT_TASKS) <= set(TASK_NAMES) and set(DEFAULT_TASKS) == set(POLICIES)
    assert not any(name.startswith("flight.") for name in TASK_NAMES) and len(TASK_NAMES) > 100


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tasks": ("click-test", "no-such-task")}, r"'tasks'.*unknown: \['no-such-task'\]"),
        ({"tasks": ()}, r"'tasks'.*of length >= 1"),
        ({"tasks": ["click-test"]}, r"'tasks'.*tuple"),
        ({"scale": 0}, r"'scale'.*>= 1"),
        ({"scale": 1.5}, r"'scale'"),
        ({"max_steps": 0}, r"'max_steps'.*>= 1"),
        ({"time_limit_s": -1.0}, r"'time_limit_s'.*> 0"),
    ],
)
def test_bad_settings_name_the_field(settings, message):
    with pytest.raises(ConfigError, match=message):
        MiniWoBHarness(**settings)


def test_unknown_setting_is_refused():
    with pytest.raises(TypeError, match="colour"):
        MiniWoBHarness(colour="red")
