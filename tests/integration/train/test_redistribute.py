"""``redistribute`` on 4 gloo processes against a single-process reference: embeddings and grads.

One spawn runs every scenario (spawning costs ~10 s): images cut by CP chunk and TP shard
borders, repeated images, TP ranks all holding the window (no sequence parallelism), a rank
encoding nothing, and an encoder output of the wrong length.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from vlrl.pack.layout import Layout
from vlrl.records import MMItemMeta
from vlrl.train.encode_plan import plan_encoders
from vlrl.train.redistribute import Routing, place_images, redistribute

WORLD = 4
FEATURES, HIDDEN = 6, 5
H = [f"{i + 1:032x}" for i in range(7)]  # content hashes

# name -> (layout, {dp_rank: (total_len, [(hash, packed position, num_tokens)])})
SCENARIOS = {
    "cp2_tp2_straddle_repeat": (
        Layout(1, 2, 2),
        {0: (40, [(H[0], 2, 9), (H[1], 13, 6), (H[0], 22, 9), (H[2], 31, 7)])},
    ),
    "dp2_tp2_no_sp": (
        Layout(2, 1, 2, sequence_parallel=False),
        {0: (24, [(H[3], 0, 5), (H[1], 10, 6)]), 1: (20, [(H[3], 4, 5), (H[4], 12, 8)])},
    ),
    "cp4_long_image": (Layout(1, 4, 1), {0: (34, [(H[5], 1, 20), (H[0], 24, 9)])}),
    "one_image_three_idle_encoders": (Layout(1, 4, 1), {0: (16, [(H[6], 0, 16)])}),
}


def _features(content_hash: str, num_tokens: int) -> torch.Tensor:
    """Stand-in preprocessed pixels, ``(num_tokens, FEATURES)``, a function of the hash alone."""
    return torch.randn(num_tokens, FEATURES, generator=torch.Generator().manual_seed(int(content_hash, 16)), dtype=torch.float64)


def _encoder() -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(FEATURES, HIDDEN).double()


def _items(batches) -> list[MMItemMeta]:
    return [
        MMItemMeta(content_hash=h, width=4, height=4, nbytes=48, store_key=f"img/{h}", grid_thw=(1, 1, n), num_tokens=n)
        for _, images in batches.values()
        for h, _, n in images
    ]


def _routing(layout: Layout, batches) -> Routing:
    pieces = [p for dp, (total, images) in batches.items() for p in place_images(layout, dp, total, images)]
    owners: dict[str, set[int]] = {}
    for p in pieces:
        owners.setdefault(p.content_hash, set()).add(p.dest_rank)
    return Routing.build(plan_encoders(_items(batches), WORLD, owners=owners), pieces)


def _expected(layout: Layout, batches, rank: int, encoder) -> torch.Tensor:
    """``rank``'s image-token embeddings, read position by position off the layout's window."""
    dp, cp, tp = layout.coords(rank)
    total, images = batches.get(dp, (0, []))
    window = [p for start, stop in layout.cp_window(total, cp) for p in range(start, stop)]
    start, stop = layout.tp_shard(len(window), tp)
    rows = []
    for position in window[start:stop]:
        assert rank in layout.owners(position, total, dp)
        for h, at, n in images:
            if at <= position < at + n:
                rows.append(encoder(_features(h, n))[position - at])
    return torch.stack(rows) if rows else torch.zeros(0, HIDDEN, dtype=torch.float64)


def _weights(name: str, rank: int, rows: int) -> torch.Tensor:
    seed = sum(map(ord, name)) * WORLD + rank
    return torch.randn(rows, HIDDEN, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _check_scenario(name: str, rank: int) -> None:
    layout, batches = SCENARIOS[name]
    routing = _routing(layout, batches)
    encoder = _encoder()
    items = routing.local_items[rank]
    outputs = [encoder(_features(h, n)) for h, n in items] or [encoder(torch.zeros(0, FEATURES, dtype=torch.float64))]

    # A repeated image is encoded once, on one rank.
    encoded: list[list[str]] = [None] * WORLD  # type: ignore[list-item]
    dist.all_gather_object(encoded, [h for h, _ in items])
    flat = [h for hashes in encoded for h in hashes]
    distinct = {h: n for _, images in batches.values() for h, _, n in images}
    assert sorted(flat) == sorted(distinct), (name, encoded)
    rows = torch.tensor([sum(out.shape[0] for out in outputs)])
    dist.all_reduce(rows)
    assert rows.item() == sum(distinct.values())

    # Forward: exactly this rank's image-token rows, in window order.
    received = redistribute(outputs, routing)
    expected = _expected(layout, batches, rank, encoder)
    assert received.shape == expected.shape == (routing.received_rows(rank), HIDDEN), name
    torch.testing.assert_close(received, expected.detach())

    # Backward: all-reduced encoder grads equal the grads of the summed single-process loss.
    (received * _weights(name, rank, len(received))).sum().backward()
    for param in encoder.parameters():
        dist.all_reduce(param.grad)
    reference = _encoder()
    loss = 0
    for r in range(WORLD):
        mine = _expected(layout, batches, r, reference)
        loss = loss + (mine * _weights(name, r, len(mine))).sum()
    loss.backward()
    for got, want in zip(encoder.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)


def _check_wrong_rows(rank: int) -> None:
    """An encoder output shorter than the item's ``num_tokens`` fails before any collective."""
    layout, batches = SCENARIOS["cp2_tp2_straddle_repeat"]
    routing = _routing(layout, batches)
    items = routing.local_items[rank]
    if not items:
        return
    outputs = [torch.zeros(n, HIDDEN) for _, n in items]
    outputs[0] = outputs[0][:-1]
    with pytest.raises(ValueError, match=f"rank {rank}: encoder output for image {items[0][0]}"):
        redistribute(outputs, routing)


def _rank_main(rank: int, rendezvous: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=WORLD)
    try:
        for name in SCENARIOS:
            _check_scenario(name, rank)
        _check_wrong_rows(rank)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_redistribute_matches_single_process(tmp_path):
    mp.spawn(_rank_main, args=(str(tmp_path / "rendezvous"),), nprocs=WORLD, join=True)
