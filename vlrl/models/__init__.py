"""Model families: what differs between Qwen2-VL, Qwen2.5-VL and Qwen3-VL (and a user's own), behind
one contract (``ModelFamily``), registered by name and detected from a checkpoint's
``config.json``; tiny offline builds of each for tests and CPU demos (``build_tiny``)."""

from pathlib import Path
from typing import Any

from vlrl.models.family import ModelFamily
from vlrl.models.registry import ModelFamilyError, family, family_of, family_of_type, register, registered
from vlrl.models.tiny import SPECIAL_TOKENS, TinyModel


def build_tiny(name: str, path: str | Path, **settings: Any) -> Path:
    """Write a tiny checkpoint of family ``name`` to ``path`` (``tiny.build_tiny``'s settings)."""
    from vlrl.models.tiny import build_tiny as build

    return build(family(name), path, **settings)


__all__ = [
    "SPECIAL_TOKENS",
    "ModelFamily",
    "ModelFamilyError",
    "TinyModel",
    "build_tiny",
    "family",
    "family_of",
    "family_of_type",
    "register",
    "registered",
]
