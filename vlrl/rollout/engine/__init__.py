"""The embedded engine: a Hugging Face Qwen2-VL model served over ``vlrl.rollout.protocol``.

``EngineCore`` does the work in-process (dynamic batching, image cache, per-trajectory KV
prefixes, weight updates between batches); ``EmbeddedEngine`` is its Ray actor and owns the
config (``EmbeddedEngine.Config(...).build()`` starts one replica).
"""

from vlrl.rollout.engine.core import EngineCore
from vlrl.rollout.engine.embedded import EmbeddedEngine

__all__ = ["EmbeddedEngine", "EngineCore"]
