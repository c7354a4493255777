"""Engine replicas: Ray actors that speak ``vlrl.rollout.protocol``.

``EngineCore`` does the embedded engine's work in-process (dynamic batching, image cache,
per-trajectory KV prefixes, weight updates between batches); ``EmbeddedEngine`` is its Ray actor
and owns the config (``EmbeddedEngine.Config(...).build()`` starts one replica). ``VLLMEngine``
is the same actor interface around vLLM on GPUs (vLLM itself is imported only inside the actor).
"""

from vlrl.rollout.engine.core import EngineCore
from vlrl.rollout.engine.embedded import EmbeddedEngine
from vlrl.rollout.engine.vllm_engine import VLLMEngine

__all__ = ["EmbeddedEngine", "EngineCore", "VLLMEngine"]
