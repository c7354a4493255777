"""Layout: rank coordinates, groups, CP windows, TP shards and token owners."""

from __future__ import annotations

import pytest
import torch

from vlrl.config import ConfigError, apply_overrides
from vlrl.pack.layout import Coords, Layout

LAYOUTS = [(1, 1, 1), (1, 2, 2), (2, 2, 1), (2, 1, 2), (1, 4, 1), (2, 2, 2), (1, 3, 2)]
LENGTHS = [0, 1, 5, 7, 8, 13, 64, 101]


@pytest.fixture(params=LAYOUTS, ids=lambda s: "x".join(map(str, s)))
def layout(request) -> Layout:
    return Layout(*request.param)


def test_ranks_are_tp_fastest_then_cp_then_dp():
    layout = Layout(2, 2, 2)
    assert [layout.coords(r) for r in range(8)] == [
        (0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)
    ]  # fmt: skip
    assert layout.coords(5) == Coords(dp=1, cp=0, tp=1)
    assert layout.tp_group(5) == [4, 5]
    assert layout.cp_group(5) == [5, 7]
    assert layout.dp_group(5) == [1, 5]


def test_coords_and_rank_round_trip(layout):
    assert layout.world_size == layout.dp * layout.cp * layout.tp
    for rank in range(layout.world_size):
        assert layout.rank(*layout.coords(rank)) == rank


@pytest.mark.parametrize("kind", ["tp", "cp", "dp"])
def test_groups_partition_the_world(layout, kind):
    group_of = getattr(layout, f"{kind}_group")
    size = getattr(layout, kind)
    groups = {tuple(group_of(rank)) for rank in range(layout.world_size)}
    assert sorted(r for g in groups for r in g) == list(range(layout.world_size))
    for group in groups:
        assert len(group) == size
        assert all(tuple(group_of(r)) == group for r in group)
        # members differ only in their own coordinate, which runs 0..size-1
        coords = [layout.coords(r) for r in group]
        assert [getattr(c, kind) for c in coords] == list(range(size))
        others = [c._replace(**{kind: 0}) for c in coords]
        assert len(set(others)) == 1


def test_padding_follows_megatron():
    assert Layout(1, 1, 1).padded_len(13) == 13
    assert Layout(1, 1, 4).padded_len(13) == 16  # SP: tp equal shards
    assert Layout(1, 1, 4, sequence_parallel=False).padded_len(13) == 13
    assert Layout(1, 2, 1).padded_len(13) == 16  # 2 * cp chunks
    assert Layout(1, 2, 2).padded_len(13) == 16
    assert Layout(1, 2, 3).padded_len(13) == 24  # 2 * cp * tp
    assert Layout(1, 4, 1).padded_len(0) == 0


@pytest.mark.parametrize("total", LENGTHS)
def test_cp_windows_tile_the_padded_sequence_once(layout, total):
    padded = layout.padded_len(total)
    covered = [p for c in range(layout.cp) for start, stop in layout.cp_window(total, c) for p in range(start, stop)]
    assert sorted(covered) == list(range(padded))
    for c in range(layout.cp):
        window = layout.cp_window(total, c)
        assert sum(stop - start for start, stop in window) == layout.window_len(total)
        assert all(start < stop for start, stop in window)


@pytest.mark.parametrize("cp", [2, 3, 4])
def test_cp_rank_holds_chunk_i_and_its_mirror(cp):
    layout = Layout(1, cp, 1)
    total = 2 * cp * 5  # chunks of 5 tokens
    for i in range(cp):
        chunks = [(j * 5, j * 5 + 5) for j in sorted({i, 2 * cp - 1 - i})]
        merged = [(chunks[0][0], chunks[-1][1])] if chunks[-1][0] == chunks[0][1] else chunks
        assert layout.cp_window(total, i) == merged
    assert layout.cp_window(total, cp - 1) == [((cp - 1) * 5, (cp + 1) * 5)]  # middle pair is adjacent


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("total", [8, 64, 100, 1000])
def test_cp_windows_balance_causal_attention(cp, total):
    """Under a causal mask a query at position q scores q + 1 keys; every CP rank gets the same sum."""
    layout = Layout(1, cp, 1)
    work = [sum(q + 1 for start, stop in layout.cp_window(total, c) for q in range(start, stop)) for c in range(cp)]
    assert len(set(work)) == 1
    # ... while the naive contiguous split is lopsided: the last rank does 2*cp - 1 times the first
    chunk = layout.window_len(total)
    naive = [sum(q + 1 for q in range(c * chunk, (c + 1) * chunk)) for c in range(cp)]
    assert naive[-1] > 2 * naive[0]


@pytest.mark.parametrize("total", LENGTHS)
def test_padding_is_the_tail_of_a_window(layout, total):
    for c in range(layout.cp):
        positions = [p for start, stop in layout.cp_window(total, c) for p in range(start, stop)]
        pad = layout.cp_pad(total, c)
        assert pad == sum(p >= total for p in positions)
        assert all(p >= total for p in positions[len(positions) - pad :])
    assert sum(layout.cp_pad(total, c) for c in range(layout.cp)) == layout.padded_len(total) - total


@pytest.mark.parametrize("total", LENGTHS)
def test_tp_shards_split_each_window(layout, total):
    window = layout.window_len(total)
    shards = [layout.tp_shard(window, t) for t in range(layout.tp)]
    assert shards == [(t * window // layout.tp, (t + 1) * window // layout.tp) for t in range(layout.tp)]
    whole = Layout(layout.dp, layout.cp, layout.tp, sequence_parallel=False)
    assert all(whole.tp_shard(window, t) == (0, window) for t in range(layout.tp))


def expected_owners(layout: Layout, total: int, dp_rank: int) -> dict[int, list[int]]:
    """Owners built the other way round: walk each rank's window and shard."""
    owners: dict[int, list[int]] = {p: [] for p in range(layout.padded_len(total))}
    for c in range(layout.cp):
        window = [p for start, stop in layout.cp_window(total, c) for p in range(start, stop)]
        for t in range(layout.tp):
            start, stop = layout.tp_shard(len(window), t)
            for p in window[start:stop]:
                owners[p].append(layout.rank(dp_rank, c, t))
    return owners


@pytest.mark.parametrize("sequence_parallel", [True, False])
@pytest.mark.parametrize("total", LENGTHS)
def test_every_position_is_owned_by_exactly_the_expected_ranks(layout, total, sequence_parallel):
    layout = Layout(layout.dp, layout.cp, layout.tp, sequence_parallel)
    for dp_rank in range(layout.dp):
        expected = expected_owners(layout, total, dp_rank)
        for position, ranks in expected.items():
            owners = layout.owners(position, total, dp_rank)
            assert sorted(owners) == sorted(ranks)
            assert len(owners) == (1 if sequence_parallel else layout.tp)
            assert {layout.coords(r).dp for r in owners} == {dp_rank}
            assert len({layout.coords(r).cp for r in owners}) == 1


def test_owners_by_hand():
    # 1x2x2, 8 tokens: chunks of 2; cp0 holds chunks 0 and 3, cp1 chunks 1 and 2; each window
    # is split in half between its two TP ranks.
    layout = Layout(1, 2, 2)
    assert [layout.owners(p, 8, 0) for p in range(8)] == [[0], [0], [2], [2], [3], [3], [1], [1]]
    layout = Layout(2, 2, 2, sequence_parallel=False)
    assert [layout.owners(p, 8, 1) for p in range(8)] == [[4, 5]] * 2 + [[6, 7]] * 4 + [[4, 5]] * 2


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Layout(0), r"'Layout.dp': got 0 \(int\); expected an integer >= 1"),
        (lambda: Layout(1, -2), r"'Layout.cp': got -2"),
        (lambda: Layout(1, 1, 1.5), r"'Layout.tp': got 1.5"),
        (lambda: Layout(True), r"'Layout.dp': got True"),
        (lambda: Layout(1, sequence_parallel="yes"), r"'Layout.sequence_parallel': got 'yes'"),
        (lambda: Layout(3, 2, ep=4), r"'Layout.ep': got 4 \(int\); expected a divisor of dp x cp = 6"),
        (lambda: Layout(2, 2, 2).check_world(6), r"world size 6 does not match the layout dp=2 x cp=2 x tp=2 = 8"),
        (lambda: Layout(2, 2, 2).coords(8), r"rank 8 out of range; expected an int in 0..7"),
        (lambda: Layout(2, 2, 2).rank(0, 2, 0), r"cp rank 2 out of range"),
        (lambda: Layout(1, 2).cp_window(8, 2), r"cp rank 2 out of range"),
        (lambda: Layout(1, 2).padded_len(-1), r"packed length -1"),
        (lambda: Layout(1, 1, 2).tp_shard(5, 0), r"CP window of 5 tokens does not split into tp=2"),
        (lambda: Layout(1, 1, 2).tp_shard(4, 2), r"tp rank 2 out of range"),
        (lambda: Layout(1, 2, 1).owners(8, 8, 0), r"packed position 8 out of range; expected an int in 0..7"),
        (lambda: Layout(1, 2, 1).owners(0, 8, 1), r"dp rank 1 out of range"),
    ],
)
def test_errors_name_what_was_wrong(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_layout_is_a_config_that_overrides_set_and_validate():
    assert apply_overrides(Layout(), ["cp=2", "tp=4", "sequence_parallel=false"]) == Layout(1, 2, 4, False)
    with pytest.raises(ConfigError, match=r"config field 'tp': got 0"):
        apply_overrides(Layout(), ["tp=0"])
    assert Layout(2, 2, 2).mesh_dims == (("dp", 2), ("cp", 2), ("tp", 2))


def test_the_expert_mesh_puts_an_ep_group_on_consecutive_dp_x_cp_ranks_at_one_tp_coordinate():
    """The mesh ``Parallel`` builds for the experts (ranks in layout order, reshaped by its dims):
    EP over consecutive DP x CP indices, CP first, as the module docstring says."""
    layout = Layout(2, 2, 2, ep=2)
    names, sizes = zip(*layout.expert_mesh_dims, strict=True)
    assert names == ("edp", "ep", "tp") and sizes == (2, 2, 2)
    ranks = torch.arange(8).reshape(sizes)  # as init_device_mesh lays the ranks out
    ep_groups = sorted(ranks[e, :, t].tolist() for e in range(2) for t in range(2))
    assert ep_groups == [[0, 2], [1, 3], [4, 6], [5, 7]]
    for a, b in ep_groups:  # same DP and TP coordinates, the two CP ranks
        assert (layout.coords(a).dp, layout.coords(a).tp) == (layout.coords(b).dp, layout.coords(b).tp)
        assert {layout.coords(a).cp, layout.coords(b).cp} == {0, 1}
