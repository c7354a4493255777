"""Every vlrl error whose ``__init__`` takes other arguments than its message pickles whole: the
same type, message and fields come back (across Ray an error that could not be rebuilt arrives as
``UnserializableException``, and its message is lost)."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import pytest

from encoders.protocol import EncoderError
from vlrl.config import ConfigError
from vlrl.pack.packer import PackError
from vlrl.pool.remote_errors import EnvCallError
from vlrl.registry import ContractError
from vlrl.records import HASH_HEX_CHARS, MMItemMeta
from vlrl.rollout.parsers.base import ParseError
from vlrl.train.loss import NonFiniteLossError

LONG = "y" * 400

ERRORS = [
    EnvCallError("light", "step()", TimeoutError(f"stuck {LONG}")),
    ConfigError("store.chunk_rows", -1, "an int >= 1", hint="rows per chunk"),
    ContractError("cost monotone", f"cost fell {LONG}"),
    ParseError(f"no action {LONG}"),
    PackError(f"rank 3 lost its window {LONG}", payload_lost=True),
    NonFiniteLossError(float("inf"), "micro-batch 2 on rank 1"),
    EncoderError("tiny-vit", f"bad grid {LONG}", item=MMItemMeta(content_hash="ab" * (HASH_HEX_CHARS // 2), width=4, height=2, nbytes=24, store_key="img/ab")),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_an_error_comes_back_from_pickle_with_its_type_message_and_fields(error):
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    fields = {k: v for k, v in vars(error).items() if not isinstance(v, BaseException)}
    assert {k: v for k, v in vars(back).items() if k in fields} == fields


def test_env_call_error_keeps_its_cause():
    back = pickle.loads(pickle.dumps(ERRORS[0]))
    assert isinstance(back.cause, TimeoutError) and str(back.cause) == f"stuck {LONG}"
    assert str(back) == f"harness 'light': EnvHost.step() raised TimeoutError: stuck {LONG}"


NEVER_PICKLED = {"ApiError": "answered over HTTP by vlrl serve, in its own process"}


def test_every_error_with_its_own_init_pickles_whole():
    """A new error class whose ``__init__`` takes other arguments fails here until it mixes in
    ``PicklesWhole`` (or says why it never crosses a process boundary)."""
    root = Path(__file__).resolve().parents[2]
    missing = []
    for top in ("vlrl", "encoders", "harnesses"):
        for path in sorted((root / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = [ast.unparse(base) for base in node.bases]
                own_init = any(isinstance(item, ast.FunctionDef) and item.name == "__init__" for item in node.body)
                errorish = any(base.endswith(("Error", "Exception")) for base in bases)
                if errorish and own_init and "PicklesWhole" not in bases and node.name not in NEVER_PICKLED:
                    missing.append(f"{path.relative_to(root)}: {node.name}")
    assert missing == [], f"errors that would arrive across Ray as UnserializableException: {missing}"
