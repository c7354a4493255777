"""Karmarkar-Karp reference: a partition, the differencing answer on known cases, equal sizes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from vlrl.pack.kk import karmarkar_karp


def sums(costs, parts) -> list[float]:
    return sorted(float(np.sum(np.asarray(costs)[part])) for part in parts)


@pytest.mark.parametrize(("n", "k"), [(0, 3), (1, 3), (2, 4), (10, 1), (10, 2), (97, 5), (1000, 8)])
@pytest.mark.parametrize("seed", range(3))
def test_every_index_in_exactly_one_of_k_parts(n, k, seed):
    costs = np.random.default_rng(seed).lognormal(0, 1, n)
    parts = karmarkar_karp(costs, k)
    assert len(parts) == k
    assert sorted(i for part in parts for i in part) == list(range(n))


def test_two_way_is_the_differencing_method():
    # 8-7 -> 1, 6-5 -> 1, then 4, 1, 1: 4-1 -> 3, 3-1 -> 2: parts differ by 2.
    assert sums([8, 7, 6, 5, 4], karmarkar_karp([8, 7, 6, 5, 4], 2)) == [14, 16]


def test_matches_the_optimum_on_an_easy_case():
    costs = [5, 5, 4, 4, 3, 3, 2, 2, 1, 1]
    assert sums(costs, karmarkar_karp(costs, 2)) == [15, 15]
    assert sums(costs, karmarkar_karp(costs, 3)) == [10, 10, 10]


@pytest.mark.parametrize("seed", range(5))
def test_close_to_optimal_on_small_cases(seed):
    """Within the largest item of the brute-force optimum (KK's classic guarantee is far tighter in practice)."""
    costs = np.random.default_rng(seed).integers(1, 50, 9)
    assignments = itertools.product(range(3), repeat=len(costs))
    best = min(max(np.bincount(assign, weights=costs, minlength=3)) for assign in assignments)
    assert max(sums(costs, karmarkar_karp(costs, 3))) <= best + costs.max()


def test_equal_size_gives_every_part_n_over_k():
    costs = np.random.default_rng(0).lognormal(0, 1, 120)
    parts = karmarkar_karp(costs, 8, equal_size=True)
    assert [len(p) for p in parts] == [15] * 8
    assert sorted(i for part in parts for i in part) == list(range(120))
    assert max(sums(costs, parts)) / np.mean(sums(costs, parts)) < 1.01


def test_fewer_items_than_parts_leaves_parts_empty():
    assert sorted(map(len, karmarkar_karp([3.0, 1.0], 4))) == [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (([1, 2], 0), {}, r"k=0; expected an int >= 1"),
        (([1, 2, 3], 2), {"equal_size": True}, r"item count \(3\) to be a multiple of k=2"),
    ],
)
def test_errors(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        karmarkar_karp(*args, **kwargs)
