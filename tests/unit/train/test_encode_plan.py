"""``plan_encoders``: balance against LPT and Karmarkar-Karp, dedup, metadata only, bounded work."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlrl.pack.kk import karmarkar_karp
from vlrl.records import MMItemMeta
from vlrl.train.encode_plan import _lpt, plan_encoders


def _item(index: int, num_tokens: int) -> MMItemMeta:
    h = f"{index:032x}"
    return MMItemMeta(
        content_hash=h, width=4, height=4, nbytes=48, store_key=f"img/{h}", grid_thw=(1, 1, num_tokens), num_tokens=num_tokens
    )


def _items(n: int, seed: int) -> list[MMItemMeta]:
    tokens = np.random.default_rng(seed).integers(16, 4096, n)
    return [_item(i, int(t)) for i, t in enumerate(tokens)]


@pytest.mark.parametrize("n, k, seed", [(5, 4, 0), (13, 4, 1), (37, 4, 2), (100, 8, 3), (1000, 16, 4)])
def test_balance_no_worse_than_lpt_and_kk(n, k, seed):
    items = _items(n, seed)
    costs = np.array([float(i.num_tokens) for i in items])
    plan = plan_encoders(items, k)
    lpt = np.bincount(_lpt(costs, k), weights=costs, minlength=k).max()
    kk = max(costs[part].sum() for part in karmarkar_karp(costs, k))
    assert plan.loads.max() <= min(lpt, kk)
    assert plan.imbalance == pytest.approx(plan.loads.max() / plan.loads.mean())


def test_repeated_images_planned_once():
    items = _items(6, 5)
    plan = plan_encoders([*items, items[2], items[0], items[2]], 3)
    assert plan.hashes == tuple(i.content_hash for i in items)
    assert sorted(i for r in range(3) for i in plan.items_of(r)) == list(range(6))


def test_repeated_hash_with_other_token_count_fails():
    a = _item(1, 10)
    with pytest.raises(ValueError, match=f"items\\[1\\] \\({a.content_hash}\\): num_tokens=11"):
        plan_encoders([a, _item(1, 11)], 2)


@pytest.mark.parametrize("pixels", [np.zeros((4, 4, 3), np.uint8), torch.zeros(4, 4, 3)])
def test_pixels_are_refused(pixels):
    with pytest.raises(TypeError, match=r"items\[1\]: .* \(pixels\); the encoder planner takes MMItemMeta only"):
        plan_encoders([_item(0, 4), pixels], 2)
    with pytest.raises(TypeError, match="never pixels"):
        plan_encoders(pixels, 2)


def test_cost_must_be_a_number():
    with pytest.raises(ValueError, match=r"cost\(items\[0\]\)"):
        plan_encoders([_item(0, 4)], 2, cost=lambda item: np.zeros(3))


def test_owner_preferred_when_free():
    # Costs 8, 4, 4 on 3 ranks: the makespan is 8 either way, so item 1 joins its owner, rank 2.
    items = [_item(0, 8), _item(1, 4), _item(2, 4)]
    free = plan_encoders(items, 3)
    plan = plan_encoders(items, 3, owners={items[1].content_hash: {2}})
    assert free.ranks[1] != 2 and plan.ranks[1] == 2
    assert plan.imbalance == free.imbalance


def test_owner_not_preferred_at_a_cost():
    items = [_item(0, 8), _item(1, 8)]
    owners = {item.content_hash: {0} for item in items}
    assert sorted(plan_encoders(items, 2, owners=owners).ranks) == [0, 1]


def test_equal_cost_items_swap_to_their_owners():
    # Four items of cost 4 on 2 ranks: balance puts two on each rank whatever the owners say;
    # with every item owned by the rank the plan did not pick, swaps bring all four home.
    items = [_item(i, 4) for i in range(4)]
    free = plan_encoders(items, 2)
    owners = {item.content_hash: {1 - rank} for item, rank in zip(items, free.ranks)}
    plan = plan_encoders(items, 2, owners=owners)
    rank_of = dict(zip(plan.hashes, plan.ranks))
    assert [rank_of[item.content_hash] for item in items] == [1 - r for r in free.ranks]
    assert plan.imbalance == free.imbalance == 1.0


def test_plans_100k_items_with_bounded_work(monkeypatch):
    """What keeps a large step's plan fast, counted rather than timed: above ``KK_MAX_ITEMS``
    distinct items the Karmarkar-Karp seed is not tried (LPT and bounded refinement only)."""
    import vlrl.train.encode_plan as encode_plan

    def refused(*args, **kwargs):
        raise AssertionError(f"Karmarkar-Karp tried on more than KK_MAX_ITEMS={encode_plan.KK_MAX_ITEMS} items")

    monkeypatch.setattr(encode_plan, "karmarkar_karp", refused)
    items = _items(100_000, 6)
    assert len(items) > encode_plan.KK_MAX_ITEMS
    plan = plan_encoders(items, 8)
    assert plan.imbalance < 1.001
