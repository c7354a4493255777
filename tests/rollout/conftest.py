"""One tiny Qwen2-VL checkpoint per test session (built offline in seconds), and its processor."""

from __future__ import annotations

import pytest
from transformers import AutoProcessor

from vlrl.rollout.tiny_model import build_tiny_qwen2vl


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory):
    return build_tiny_qwen2vl(tmp_path_factory.mktemp("tiny-qwen2vl"))


@pytest.fixture(scope="session")
def processor(tiny_path):
    return AutoProcessor.from_pretrained(tiny_path)
