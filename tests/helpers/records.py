"""``seq_meta``: a valid ``SeqMeta`` for tests, naming only the fields a test cares about."""

from __future__ import annotations

from typing import Any

from vlrl.records import SeqMeta


def seq_meta(key: str, num_tokens: int, **fields: Any) -> SeqMeta:
    """A finished, unrewarded single-context sequence unless ``fields`` say otherwise."""
    defaults: dict[str, Any] = dict(
        group_id="g", source="desktop", sample_index=0, reward=0.0, success=False, finish="done", turns=1,
        num_response_tokens=0, context_lengths=(num_tokens,), policy_version=0,
    )  # fmt: skip
    return SeqMeta(key=key, num_tokens=num_tokens, **{**defaults, **fields})
