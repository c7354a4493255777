"""examples/probe_copying.py: its sequences hold the field's value in the goal and the answer,
held-out name pairs stay out of training. A short probe's training is
tests/e2e/examples/test_probe_copying.py."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest


PROBE = Path(__file__).resolve().parents[3] / "examples" / "probe_copying.py"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("probe_copying", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_sequence_names_the_field_and_its_answer_types_the_goals_value(probe):
    rng = random.Random(0)
    for _ in range(50):
        prompt, answer, value = probe.sequence(("Ada", "Silva"), rng, filler=10)
        field = "Name" if value == "Ada Silva" else "Email"
        assert value in ("Ada Silva", *(f"ada@{d}" for d in probe.DOMAINS))
        assert f'"{value}"' in prompt.split("\n")[1] and prompt.endswith(f" {field}<|im_end|>\n<|im_start|>assistant\n")
        assert answer == f'{{"action": "type", "text": "{value}"}}<|im_end|>'


def test_held_out_name_pairs_never_train(probe):
    held_out, train = probe.split_pairs(random.Random(0))
    assert len(held_out) == probe.HELD_OUT_PAIRS and not set(held_out) & set(train)
    assert len(set(held_out) | set(train)) == len(probe.FIRST_NAMES) * len(probe.LAST_NAMES)
