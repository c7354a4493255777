"""The trainer benchmark: its workload, its figures, and ``vlrl bench train --json`` end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vlrl.bench.train_bench import SIZES, WorkloadSpec, merge, parse_layout, summarise, write_workload
from vlrl.mm.image_rows import read_images
from vlrl.store import LocalStore

SPEC = WorkloadSpec(groups=3, members=4, max_turns=4, micro_batch_tokens=1024, seed=1)


def test_workload_is_deterministic_gui_trajectories(tiny_path):
    a, b = LocalStore(), LocalStore()
    metas = write_workload(a, SPEC, tiny_path)
    assert metas == write_workload(b, SPEC, tiny_path)
    assert len(metas) == SPEC.groups * SPEC.members
    for meta in metas:
        row = a.get([meta.key])[meta.key]
        for name, values in b.get([meta.key])[meta.key].items():
            np.testing.assert_array_equal(row[name], values, err_msg=name)
        assert 2 <= meta.turns == len(meta.images) == len(meta.image_offsets) <= SPEC.max_turns
        assert len(row["token_ids"]) == meta.num_tokens <= SPEC.micro_batch_tokens
        assert int(row["loss_mask"].sum()) == meta.num_response_tokens > 0
        assert not row["loss_mask"][: meta.context_lengths[0]].any()  # the first prompt carries no loss
        assert len({(m.width, m.height) for m in meta.images}) == 1  # one device per trajectory
        for image in meta.images:
            assert read_images(a, [image.store_key])[image.store_key].shape == (image.height, image.width, 3)
    for g in range(SPEC.groups):
        firsts = {m.images[0].content_hash for m in metas if m.group_id == f"g{g}"}
        assert len(firsts) == 1  # group members share the start screen
    later = [m.content_hash for meta in metas for m in meta.images[1:]]
    assert len(later) == len(set(later))


def test_layout_names_and_ratios():
    assert parse_layout("1x2x2") == (1, 2, 2)
    with pytest.raises(ValueError, match="DPxCPxTP"):
        parse_layout("2x2")
    figures = {"tokens_per_s": 100.0, "peak_mem_mb": 1000.0, "step_s": 1.0, "added_mem_mb": 200.0, "first_loss": 0.1}
    extra = {"real_tokens": 100, "micro_batches": 2, "threads_per_rank": 1}
    per_layout = {"1x1x1": {**figures, **extra}, "2x1x1": {**figures, **extra, "tokens_per_s": 150.0, "peak_mem_mb": 800.0}}
    result = summarise(per_layout, backend="gloo")
    assert result["layouts"] == ["1x1x1", "2x1x1"]
    assert result["speedup_vs_single"]["2x1x1"] == pytest.approx(1.5)
    assert result["mem_vs_single"]["2x1x1"] == pytest.approx(0.8)
    merged = merge([result, {**summarise({"1x1x1": {**figures, **extra, "tokens_per_s": 400.0}}), "backend": "nccl"}])
    assert merged["runs"] == ["gloo:1x1x1", "gloo:2x1x1", "nccl:1x1x1"]
    assert merged["speedup_vs_gloo"] == {"nccl:1x1x1": pytest.approx(4.0)}


@pytest.mark.slow
def test_vlrl_bench_train_reports_every_layout():
    from tests.bench.run_bench import run_bench

    result = run_bench("train")
    names = ["x".join(map(str, shape)) for shape in SIZES["small"].layouts]
    assert result["layouts"] == names
    for key in ("tokens_per_s", "peak_mem_mb", "step_s", "added_mem_mb", "speedup_vs_single", "mem_vs_single"):
        assert set(result[key]) == set(names), key
        for name, value in result[key].items():
            assert math.isfinite(value) and value > 0, (key, name, value)
    # Every layout computes the same first step from the same weights (float64).
    assert max(result["first_loss"].values()) == pytest.approx(min(result["first_loss"].values()), rel=1e-9)
    print("\nvlrl bench train (small): " + ", ".join(
        f"{n} {result['tokens_per_s'][n]:.0f} tok/s x{result['speedup_vs_single'][n]:.2f}"
        f" {result['peak_mem_mb'][n]:.0f} MB x{result['mem_vs_single'][n]:.2f}" for n in names
    ))  # fmt: skip
