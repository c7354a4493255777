"""The routing under ``redistribute`` refuses pieces that run past their image or overlap, on the
scenarios of tests/integration/train/test_redistribute.py (which runs them on 4 gloo processes)."""

from __future__ import annotations

import pytest

from tests.integration.train.test_redistribute import SCENARIOS, WORLD, _items
from vlrl.train.encode_plan import plan_encoders
from vlrl.train.redistribute import Routing, place_images


def test_routing_rejects_rows_past_the_image():
    layout, batches = SCENARIOS["cp4_long_image"]
    plan = plan_encoders(_items(batches), WORLD)
    pieces = [p for dp, (total, images) in batches.items() for p in place_images(layout, dp, total, images)]
    bad = pieces[0]._replace(num_rows=100)
    with pytest.raises(ValueError, match=f"image {bad.content_hash}, which has 20 tokens"):
        Routing.build(plan, [bad, *pieces[1:]])


def test_routing_rejects_overlapping_pieces():
    layout, batches = SCENARIOS["cp4_long_image"]
    plan = plan_encoders(_items(batches), WORLD)
    pieces = place_images(layout, 0, *batches[0])
    with pytest.raises(ValueError, match=f"pieces for rank {pieces[0].dest_rank} do not tile"):
        Routing.build(plan, [*pieces, pieces[0]])
