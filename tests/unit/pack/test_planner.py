"""MicroBatchPlanner: every sequence once, within budget, equal counts, balance at least KK's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import records
from vlrl.bench.pack_bench import draw_lengths
from vlrl.config import validate
from vlrl.pack.cost import CostModel
from vlrl.pack.kk import karmarkar_karp
from vlrl.pack.layout import Layout
from vlrl.pack.plan import MicroBatch, Plan, imbalance
from vlrl.pack.planner import MicroBatchPlanner
from vlrl.records import SeqMeta

PAD = ("<pad>", -1)


def planner(budget: int, linear: float = 1.0, quadratic: float = 2e-5, refine_steps: int = 64) -> MicroBatchPlanner:
    config = MicroBatchPlanner.Config(
        max_tokens_per_micro_batch=budget,
        cost=CostModel.Config(linear=linear, quadratic=quadratic),
        refine_steps=refine_steps,
    )
    return validate(config).build()


def check_plan(plan: Plan, keys: list[str], lengths: list[int], budget: int, dp: int) -> None:
    """The invariants every plan keeps."""
    assert plan.dp == dp
    assert {len(batches) for batches in plan.ranks} == {plan.num_micro_batches}  # ranks step together
    seen = [k for batches in plan.ranks for mb in batches for k in mb.keys]
    assert sorted(seen) == sorted(keys)  # every sequence exactly once
    length_of = dict(zip(keys, lengths))
    for batches in plan.ranks:
        for mb in batches:
            assert mb.num_tokens <= budget
            assert mb.lengths == tuple(length_of[k] for k in mb.keys)
            assert mb.offsets == tuple(np.cumsum((0,) + mb.lengths)[:-1])
            assert mb.num_tokens == sum(mb.lengths)
        assert [mb.cost for mb in batches] == sorted((mb.cost for mb in batches), reverse=True)


def seq_meta(key: str, num_tokens: int) -> SeqMeta:
    return records.seq_meta(key, num_tokens, num_response_tokens=1)


CASES = [  # (n sequences, dp, budget, seed)
    (0, 4, 64, 0),
    (1, 1, 64, 0),
    (3, 8, 64, 1),
    (7, 2, 40, 2),
    (50, 4, 64, 3),
    (200, 3, 100, 4),
    (1000, 8, 256, 5),
    (3000, 16, 512, 6),
]


@pytest.mark.parametrize(("n", "dp", "budget", "seed"), CASES)
def test_plan_invariants(n, dp, budget, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, budget + 1, n).tolist()
    keys = [f"seq/{i}" for i in range(n)]
    plan = planner(budget).plan_lengths(keys, lengths, dp)
    check_plan(plan, keys, lengths, budget, dp)


def test_plan_reads_seq_meta():
    seqs = [seq_meta(f"k{i}", n) for i, n in enumerate([30, 20, 10, 25, 5])]
    plan = planner(40).plan(seqs, dp=2)
    check_plan(plan, [s.key for s in seqs], [s.num_tokens for s in seqs], 40, 2)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("n", "dp"), [(2, 4), (5, 3), (9, 4), (40, 8), (300, 8), (2000, 16)])
def test_balance_at_least_as_good_as_karmarkar_karp(n, dp, seed):
    lengths = draw_lengths(n, seed)
    p = planner(32768)
    plan = p.plan_lengths([f"s{i}" for i in range(n)], lengths, dp)
    costs = p.cost_model.sequence_costs(lengths)
    kk = imbalance(np.array([costs[part].sum() for part in karmarkar_karp(costs, dp)]))
    assert plan.imbalance() <= kk + 1e-9
    assert np.isclose(plan.rank_costs().sum(), costs.sum())


def test_refinement_beats_karmarkar_karp_where_it_can():
    # KK on [8, 7, 6, 5, 4] in two: 8-7, 6-5 -> (1), (1), 4 -> {4, 5, 7} | {6, 8} = 16 | 14.
    # One swap (7 for 6) makes 15 | 15.
    keys, lengths = list("abcde"), [8, 7, 6, 5, 4]
    kk = sorted(sum(lengths[i] for i in part) for part in karmarkar_karp(lengths, 2))
    assert kk == [14, 16]
    assert planner(16, quadratic=0, refine_steps=0).plan_lengths(keys, lengths, 2).imbalance() == 16 / 15
    assert planner(16, quadratic=0).plan_lengths(keys, lengths, 2).imbalance() == 1.0


def test_small_case_by_hand():
    # Linear cost, dp=2, budget 10: the ranks split 15 | 15 as {a=8, b=7} | {c=6, d=5, e=4}.
    # Best-fit decreasing: 8 and 7 cannot share (15 > 10) -> [8], [7]; 6 opens a bin (4 left),
    # 5 does not fit there -> new bin (5 left), 4 goes to the tightest fit -> [6, 4], [5].
    plan = planner(10, quadratic=0).plan_lengths(list("abcde"), [8, 7, 6, 5, 4], 2)
    ranks = sorted([[mb.keys for mb in batches] for batches in plan.ranks])
    assert ranks == [[("a",), ("b",)], [("c", "e"), ("d",)]]
    assert plan.rank_costs().tolist() == [15.0, 15.0]
    mb = next(mb for batches in plan.ranks for mb in batches if mb.keys == ("c", "e"))
    assert (mb.offsets, mb.num_tokens, mb.cost) == ((0, 6), 10, 10.0)


def test_short_rank_splits_its_costliest_micro_batch():
    # Quadratic cost only: costs 16, 16, 16, 4, 4, 4, 4 split 32 | 32 as {4, 4} | {4, 2, 2, 2, 2}.
    # Under 8 tokens the second rank needs two micro-batches, the first fits in one [4, 4],
    # which it splits into [4] and [4] so both ranks step twice.
    keys = [f"s{i}" for i in range(7)]
    lengths = [4, 4, 4, 2, 2, 2, 2]
    plan = planner(8, linear=0, quadratic=1).plan_lengths(keys, lengths, 2)
    check_plan(plan, keys, lengths, 8, 2)
    assert plan.num_micro_batches == 2
    assert plan.rank_costs().tolist() == [32.0, 32.0]
    # best-fit decreasing packs the other rank as [4, 2, 2] (8 tokens) and [2, 2]
    assert sorted([[mb.lengths for mb in batches] for batches in plan.ranks]) == [[(4,), (4,)], [(4, 2, 2), (2, 2)]]


def test_empty_micro_batch_only_when_a_rank_has_too_few_sequences():
    # Costs 16 | 4+4+4+4: the rank with the single 4-token sequence cannot split it, so it gets
    # one empty micro-batch to step with the other rank's two.
    plan = planner(4, linear=0, quadratic=1).plan_lengths(list("abcde"), [4, 2, 2, 2, 2], 2)
    check_plan(plan, list("abcde"), [4, 2, 2, 2, 2], 4, 2)
    assert sorted([[mb.lengths for mb in batches] for batches in plan.ranks]) == [[(2, 2), (2, 2)], [(4,), ()]]


def test_fewer_sequences_than_ranks():
    # Every rank steps once; the ranks without a sequence step through an empty micro-batch.
    plan = planner(100).plan_lengths(["a", "b", "c"], [10, 20, 30], 8)
    assert plan.num_micro_batches == 1
    assert sorted(len(batches[0].keys) for batches in plan.ranks) == [0] * 5 + [1] * 3
    empty = next(batches[0] for batches in plan.ranks if not batches[0].keys)
    assert (empty.num_tokens, empty.cost, empty.cp_ranges(0, Layout(8, 2, 1))) == (0, 0, [])


def test_no_sequences_no_micro_batches():
    plan = planner(100).plan_lengths([], [], 4)
    assert (plan.dp, plan.num_micro_batches, plan.imbalance()) == (4, 0, 1.0)


@pytest.mark.parametrize(
    ("keys", "lengths", "dp", "message"),
    [
        (["a", "x/7"], [10, 101], 2, r"sequence 'x/7' has 101 tokens; expected <= max_tokens_per_micro_batch=100"),
        (["a", "b"], [10, 0], 2, r"sequence 'b' has 0 tokens; expected >= 1 token"),
        (["a", "b", "a"], [1, 2, 3], 2, r"sequence key 'a' appears more than once"),
        (["a", "b"], [1], 2, r"got 2 keys and num_tokens of shape \(1,\)"),
        (["a"], [1.5], 2, r"num_tokens has dtype float64; expected integer token counts"),
        (["a"], [1], 0, r"dp=0; expected an int >= 1"),
    ],
)
def test_bad_input_is_named(keys, lengths, dp, message):
    with pytest.raises(ValueError, match=message):
        planner(100).plan_lengths(keys, lengths, dp)


def test_plan_rejects_unequal_micro_batch_counts():
    mb = MicroBatch(keys=("a",), lengths=(3,), cost=3.0)
    with pytest.raises(ValueError, match=r"micro-batch counts \[1, 2\] per DP rank"):
        Plan(((mb,), (mb, mb)))


def test_config_validates_and_names_bad_fields():
    from vlrl.config import ConfigError, field_docs

    config = validate(MicroBatchPlanner.Config())
    assert set(field_docs(MicroBatchPlanner.Config)) == {"max_tokens_per_micro_batch", "cost", "refine_steps"}
    assert isinstance(config.build(), MicroBatchPlanner)
    with pytest.raises(ConfigError, match="max_tokens_per_micro_batch"):
        validate(MicroBatchPlanner.Config(max_tokens_per_micro_batch=0))
    with pytest.raises(ConfigError, match="cost.quadratic"):
        validate(MicroBatchPlanner.Config(cost=CostModel.Config(linear=0, quadratic=0)))


def packed_tokens(mb: MicroBatch) -> list[tuple[str, int]]:
    """The packed micro-batch spelled out as (key, row position) per token."""
    return [(key, i) for key, n in zip(mb.keys, mb.lengths) for i in range(n)]


@pytest.mark.parametrize(("cp", "tp"), [(1, 1), (1, 2), (2, 1), (2, 2), (4, 1), (4, 2), (3, 1)])
def test_cp_ranges_reconstruct_each_window(cp, tp):
    rng = np.random.default_rng(cp * 10 + tp)
    lengths = rng.integers(1, 40, 60).tolist()
    keys = [f"row/{i}" for i in range(60)]
    plan = planner(97).plan_lengths(keys, lengths, 2)
    layout = Layout(2, cp, tp)
    for dp_rank, batches in enumerate(plan.ranks):
        for i, mb in enumerate(batches):
            packed = packed_tokens(mb)
            padded = packed + [PAD] * (layout.padded_len(mb.num_tokens) - mb.num_tokens)
            for c in range(cp):
                window = [padded[p] for start, stop in layout.cp_window(mb.num_tokens, c) for p in range(start, stop)]
                ranges = plan.cp_ranges(dp_rank, i, c, layout)
                rebuilt = [(key, p) for key, start, stop, _ in ranges for p in range(start, stop)]
                rebuilt += [PAD] * layout.cp_pad(mb.num_tokens, c)
                assert rebuilt == window
                starts = np.cumsum([0] + [r.stop - r.start for r in ranges])[:-1].tolist()
                assert [r.window_start for r in ranges] == starts
                assert all(0 <= r.start < r.stop <= dict(zip(keys, lengths))[r.key] for r in ranges)


def test_cp_ranges_by_hand():
    # One micro-batch [a: 5 tokens, b: 6 tokens] = 11, cp=2 pads to 12 in chunks of 3:
    # cp0 holds chunks 0 and 3 = packed [0, 3) + [9, 12) = a[0:3], b[4:6], 1 pad;
    # cp1 holds chunks 1 and 2 = packed [3, 9) = a[3:5], b[0:4].
    mb = MicroBatch(keys=("a", "b"), lengths=(5, 6), cost=11.0)
    layout = Layout(1, 2, 1)
    assert mb.cp_ranges(0, layout) == [("a", 0, 3, 0), ("b", 4, 6, 3)]
    assert layout.cp_pad(11, 0) == 1
    assert mb.cp_ranges(1, layout) == [("a", 3, 5, 0), ("b", 0, 4, 2)]
    with pytest.raises(ValueError, match="layout has dp=2 but the plan was made for dp=1"):
        Plan(((mb,),)).cp_ranges(0, 0, 0, Layout(2, 2, 1))


def test_cp_ranges_of_a_missing_micro_batch():
    plan = planner(100).plan_lengths(["a"], [5], 1)
    with pytest.raises(ValueError, match="no micro-batch 1 of dp rank 0; the plan has 1 micro-batches for each"):
        plan.cp_ranges(0, 1, 0, Layout(1))
