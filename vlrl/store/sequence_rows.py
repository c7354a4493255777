"""A sequence's per-token rows, read where ``SeqMeta`` says they are stored.

A branch of a branching rollout shares its first ``prefix_tokens`` tokens with its tree's root
(``SeqMeta.prefix_key``): those rows are stored once, under the root's key, and the branch's own
key holds only the rows after them. Read as one sequence, a prefix row is

- the root's row for what the tokens *are* (``PREFIX_FIELDS``: the ids, and the experts a
  mixture-of-experts forward routed them to), and
- the field's pad value for everything the branch's loss reads (logprobs, loss mask, advantages,
  teacher scores, sampling extras): the branch generated none of those tokens, they are its prompt.

Writers of later fields (advantages, teacher scores) compute them over the whole sequence and
store ``own_rows`` of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vlrl.records import ROUTED_EXPERTS, TOKEN_IDS, SeqMeta, pad_value
from vlrl.store.base import PayloadStore
from vlrl.store.errors import FieldMissingError

PREFIX_FIELDS = frozenset({TOKEN_IDS, ROUTED_EXPERTS})
"""Fields whose prefix rows are the root's rows; every other field is padding there."""


def own_rows(meta: SeqMeta, values: np.ndarray) -> np.ndarray:
    """The rows of a whole-sequence array (``num_tokens`` rows) that ``meta.key`` stores."""
    if len(values) != meta.num_tokens:
        raise ValueError(f"store key {meta.key!r}: {len(values)} rows; SeqMeta.num_tokens={meta.num_tokens} expected")
    return values[meta.prefix_tokens :]


def read_range(store: PayloadStore, meta: SeqMeta, field: str, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of ``field`` of the whole sequence ``meta``."""
    shared = meta.prefix_tokens
    if stop <= shared or start >= shared:
        if start >= shared:
            return store.get_range(meta.key, field, start - shared, stop - shared)
        if field in PREFIX_FIELDS:
            return store.get_range(meta.prefix_key, field, start, stop)
        schema = store.schema(meta.key)  # the row form, from the index: no payload moves
        if field not in schema:
            raise FieldMissingError(f"store key {meta.key!r} has no field {field!r}; it has {sorted(schema)}")
        spec = schema[field]
        return np.full((stop - start, *spec.shape[1:]), pad_value(field), dtype=spec.dtype)
    head = read_range(store, meta, field, start, shared)
    return np.concatenate([head, store.get_range(meta.key, field, 0, stop - shared)])


def read_sequences(
    store: PayloadStore, metas: Sequence[SeqMeta], fields: Sequence[str]
) -> dict[str, dict[str, np.ndarray]]:
    """``store.get`` of whole sequences: every field with ``num_tokens`` rows, a branch's prefix
    rows read from its root (or padding) as the module docstring says."""
    rows = store.get([m.key for m in metas], fields=list(fields))
    prefixed = [m for m in metas if m.prefix_key]
    wanted = [f for f in fields if f in PREFIX_FIELDS]
    roots = store.get(list(dict.fromkeys(m.prefix_key for m in prefixed)), fields=wanted) if wanted and prefixed else {}
    for meta in prefixed:
        own = rows[meta.key]
        for field in fields:
            tail = own[field]
            if field in PREFIX_FIELDS:
                head = roots[meta.prefix_key][field][: meta.prefix_tokens]
            else:
                head = np.full((meta.prefix_tokens, *tail.shape[1:]), pad_value(field), dtype=tail.dtype)
            own[field] = np.concatenate([head, tail])
    return rows
