"""The one table of payload fields: what it promises, and that nothing names a field past it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from vlrl.records import FIELDS, ROLLOUT_FIELDS, fields_for
from vlrl.rollout.protocol import GenerateResult
from vlrl.rollout.trajectory import Sequence
from vlrl.store import SUPPORTED_DTYPES

ROOT = Path(__file__).resolve().parents[2]

OTHER_MEANINGS = {
    ("vlrl/job/action_text.py", "pixels"): "the Qwen scroll call's argument",
    ("vlrl/rollout/parsers/qwen.py", "pixels"): "the Qwen scroll call's argument",
    ("vlrl/mm/canonical.py", "pixels"): "the parameter an image error names",
    ("vlrl/train/encode_plan.py", "pixels"): "the word in an error message",
    ("vlrl/rollout/engine/vllm_inputs.py", "logprobs"): "vLLM's SamplingParams keyword",
    ("vlrl/rollout/http_endpoint.py", "logprobs"): "the OpenAI chat-completions wire key",
    ("vlrl/rollout/http_endpoint.py", "token_ids"): "the OpenAI chat-completions wire key",
    ("vlrl/rollout/external/tracer.py", "logprobs"): "the OpenAI chat-completions wire key",
    ("vlrl/rollout/external/tracer.py", "token_ids"): "the OpenAI chat-completions wire key",
    ("vlrl/rollout/server/app.py", "logprobs"): "the OpenAI chat-completions wire key",
    ("vlrl/rollout/server/app.py", "token_ids"): "the OpenAI chat-completions wire key",
    ("vlrl/rollout/server/wire.py", "logprobs"): "the OpenAI chat-completions wire key",
    ("vlrl/train/loss.py", "loss_mask"): "the loss's keyword argument in its input check",
    ("vlrl/train/loss.py", "teacher_logprobs"): "the loss's keyword argument in its input check",
    ("vlrl/train/loss.py", "advantages"): "the loss's keyword argument in its input check",
    ("vlrl/train/loss.py", "old_logprobs"): "the loss's keyword argument in its input check",
}
"""String literals spelled like a payload field that mean something else, with what they mean."""


def field_literals() -> set[tuple[str, str]]:
    """(file, literal) of every string constant spelled like a payload field (or the old rename),
    outside the table itself."""
    names = {*FIELDS, "old_logprobs"}
    found = set()
    for top in ("vlrl", "encoders", "harnesses"):
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "vlrl/records/fields.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in names:
                    found.add((rel, node.value))
    return found


def test_only_the_table_spells_a_payload_field():
    assert field_literals() - set(OTHER_MEANINGS) == set()


def test_every_field_has_a_dtype_every_store_round_trips():
    for field in FIELDS.values():
        assert field.dtype in SUPPORTED_DTYPES, field.name
        assert field.writer and field.doc, field.name


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ({"likelihood"}, ("token_ids", "loss_mask")),
        ({"policy_gradient"}, ("token_ids", "logprobs", "loss_mask", "advantages")),
        ({"likelihood", "distillation"}, ("token_ids", "loss_mask", "teacher_logprobs")),
    ],
)
def test_the_packed_fields_follow_the_loss_terms(terms, expected):
    assert fields_for(terms) == expected


def test_an_unknown_loss_term_is_refused():
    with pytest.raises(ValueError, match=r"loss terms \['ppo'\]"):
        fields_for({"ppo"})


def test_a_rollout_payload_is_the_table_s_rollout_fields_with_their_dtypes():
    sequence = Sequence()
    sequence.add_prompt([5, 6, 7], [], [])
    sequence.add_generated(GenerateResult("r", np.array([8, 9], np.int32), np.array([-0.5, -1.0], np.float32), "stop", 0, 0, 0))
    payload = sequence.payload()
    assert tuple(payload) == ROLLOUT_FIELDS
    for name, array in payload.items():
        assert array.dtype == FIELDS[name].dtype and array.shape == (5,), name
