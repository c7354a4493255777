"""Engine replicas: Ray actors that speak ``vlrl.rollout.protocol``.

``EngineCore`` does the embedded engine's work in-process (dynamic batching, image cache,
per-trajectory KV prefixes, weight updates between batches); ``EmbeddedEngine`` is its Ray actor
and owns the config (``EmbeddedEngine.Config(...).build()`` starts one replica). ``VLLMEngine``
is the same actor interface around vLLM on GPUs (vLLM itself is imported only inside the actor).

The engines are imported on first use: they bring torch and transformers, which a process that
needs only a light module of this package (each replica's ``WeightsKeeper`` actor) would
otherwise load for nothing, about 5 s of CPU and 0.9 GB per process.
"""

from __future__ import annotations

import importlib
from typing import Any

_MODULES = {"EngineCore": "core", "EmbeddedEngine": "embedded", "VLLMEngine": "vllm_engine"}
__all__ = list(_MODULES)


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULES[name]}"), name)
