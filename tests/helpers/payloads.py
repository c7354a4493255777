"""Hand-built groups: ``SeqMeta`` records and the store payloads they describe."""

from __future__ import annotations

import numpy as np

from vlrl.records import SeqMeta
from vlrl.store import PayloadStore


def loss_mask(layout: tuple[int, ...]) -> np.ndarray:
    """Alternating prompt/response token counts -> the mask: ``(2, 3, 1, 2)`` is ``00111 0 11``."""
    return np.concatenate([np.full(n, i % 2 == 1) for i, n in enumerate(layout)])


def meta(
    key: str,
    *,
    group: str = "g",
    reward: float = 0.0,
    success: bool = False,
    layout: tuple[int, ...] = (3, 2),
    turns: int = 1,
) -> SeqMeta:
    mask = loss_mask(layout)
    return SeqMeta(
        key=key,
        group_id=group,
        source="desktop",
        sample_index=0,
        reward=reward,
        success=success,
        finish="done",
        turns=turns,
        num_tokens=mask.size,
        num_response_tokens=int(mask.sum()),
        context_lengths=(mask.size,),
        policy_version=0,
    )


def sized(key: str, response_tokens: int, **kw) -> SeqMeta:
    """A record with one prompt token and ``response_tokens`` generated ones."""
    return meta(key, layout=(1, response_tokens), **kw)


def put_row(store: PayloadStore, m: SeqMeta, layout: tuple[int, ...], seed: int = 0) -> dict[str, np.ndarray]:
    """Write the payload ``m`` describes: int32 ids, float32 logprobs (0 on prompt tokens), bool mask."""
    rng = np.random.default_rng(seed)
    mask = loss_mask(layout)
    row = {
        "token_ids": rng.integers(0, 1000, mask.size).astype(np.int32),
        "logprobs": np.where(mask, -rng.random(mask.size), 0).astype(np.float32),
        "loss_mask": mask,
    }
    store.put(m.key, row)
    return row


def group(store: PayloadStore, rewards, successes=None, layouts=None, group_id: str = "g") -> list[SeqMeta]:
    """One group written to ``store``: a record and a payload per reward."""
    successes = successes or [r > 0 for r in rewards]
    layouts = layouts or [(3, 2, 1, 2)] * len(rewards)
    metas = []
    for i, (r, s, layout) in enumerate(zip(rewards, successes, layouts)):
        m = meta(f"{group_id}/{i}", group=group_id, reward=r, success=s, layout=layout)
        put_row(store, m, layout, seed=i)
        metas.append(m)
    return metas
