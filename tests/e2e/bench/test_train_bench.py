"""``vlrl bench train --json`` end to end at smoke size, in this process (its ranks spawned). Its workload
and figures are tests/unit/bench/test_train_bench.py."""

from __future__ import annotations

import math

import pytest

from vlrl.bench.train_bench import SIZES


def test_vlrl_bench_train_reports_every_layout():
    from tests.helpers.run_bench import run_bench

    result = run_bench("train", size="smoke")
    size = SIZES["smoke"]
    names = ["x".join(map(str, shape)) for shape in size.layouts]
    assert result["layouts"] == names
    batch = result["batch"]
    assert len(batch["sequence_tokens"]) == size.workload.sequences
    assert size.workload.min_tokens * 0.6 < batch["sequence_tokens"][0] <= size.workload.min_tokens
    assert size.workload.max_tokens * 0.6 < batch["sequence_tokens"][-1] <= size.workload.max_tokens
    for name in names:
        # The trainer stepped on every token of the batch once, whatever the layout splits.
        assert result["real_tokens"][name] == batch["workload_tokens"] == sum(batch["sequence_tokens"]), name
        # Activations, gradients and optimizer state are allocated above the pre-step baseline ...
        assert result["mem_above_baseline_mb"][name] > 0 and result["pss_above_baseline_mb"][name] > 0, name
        # ... and a longer sequence needs more of them (the probes: shortest, then longest alone).
        lengths = (batch["sequence_tokens"][0], batch["sequence_tokens"][-1])
        short, long = (result["mem_by_tokens"][name][str(n)] for n in lengths)
        assert 0 < short < long, (name, short, long)
        assert len(result["memory_per_rank"][name]) == math.prod(size.layouts[names.index(name)])
    # Every layout takes the same steps from the same weights (float64): the same losses, step by step,
    # and the steps change them (the optimizer ran).
    reference = result["losses"]["1x1x1"]
    assert len(reference) == 1 + size.steps and reference[0] != reference[-1]
    for name in names:
        assert result["losses"][name] == pytest.approx(reference, rel=1e-9, abs=1e-12), name
    # The report plots each layout's probe memory over sequence length.
    from vlrl.bench.curves import curves_of

    (curve,) = curves_of("train", result)
    assert set(curve.series) == set(names) and all(len(points) == 2 for points in curve.series.values())
    print("\nvlrl bench train (smoke): " + ", ".join(
        f"{n} {result['tokens_per_s'][n]:.0f} tok/s x{result['speedup_vs_single'][n]:.2f}"
        f" +{result['mem_above_baseline_mb'][n]:.0f} MB x{result['mem_above_baseline_vs_single'][n]:.2f}" for n in names
    ))  # fmt: skip
