"""The trainer benchmark's parts: its workload and its figures. ``vlrl bench train --json`` end to end
is tests/e2e/bench/test_train_bench.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import AutoProcessor

from vlrl.bench.train_bench import merge, parse_layout, summarise
from vlrl.bench.train_workload import ModelSpec, WorkloadSpec, build_model, token_targets, write_workload
from vlrl.mm import patch_rule_of
from vlrl.mm.image_rows import read_images
from vlrl.store import LocalStore

SPEC = WorkloadSpec(
    groups=3, members=2, min_tokens=1000, max_tokens=3000, micro_batch_tokens=3072, screen_scale=3, seed=1
)


@pytest.fixture(scope="module")
def bench_model(tmp_path_factory):
    """The bench's model (Qwen2-VL pixel bounds on the processor), one small layer."""
    return build_model(tmp_path_factory.mktemp("train-bench-model"), ModelSpec(intermediate=64, layers=1))


def test_workload_is_deterministic_gui_trajectories(bench_model):
    a, b = LocalStore(), LocalStore()
    metas = write_workload(a, SPEC, bench_model)
    assert metas == write_workload(b, SPEC, bench_model)
    assert len(metas) == SPEC.groups * SPEC.members
    config = json.loads((bench_model / "config.json").read_text())
    start, image_id, end = (config[k] for k in ("vision_start_token_id", "image_token_id", "vision_end_token_id"))
    targets = token_targets(SPEC)
    assert min(targets) == SPEC.min_tokens and max(targets) == SPEC.max_tokens
    rule = patch_rule_of(AutoProcessor.from_pretrained(bench_model))
    for meta, target in zip(metas, targets, strict=True):
        row = a.get([meta.key])[meta.key]
        for name, values in b.get([meta.key])[meta.key].items():
            np.testing.assert_array_equal(row[name], values, err_msg=name)
        assert 2 <= meta.turns == len(meta.images) == len(meta.image_offsets)
        assert target * 0.6 < len(row["token_ids"]) == meta.num_tokens <= target  # turns stop before the target
        ids = row["token_ids"]
        for (offset, index), image in zip(meta.image_offsets, meta.images, strict=True):
            assert image.num_tokens == rule.num_tokens(image.width, image.height) > 64  # the patch rule, not the cap
            assert ids[offset - 1] == start and ids[offset + image.num_tokens] == end
            assert (ids[offset : offset + image.num_tokens] == image_id).all()
        image_tokens = sum(m.num_tokens for m in meta.images)
        assert int((ids == image_id).sum()) == image_tokens > meta.num_tokens / 2  # screenshots dominate, as in GUI RL
        assert int(row["loss_mask"].sum()) == meta.num_response_tokens > 0
        assert not row["loss_mask"][: meta.context_lengths[0]].any()  # the first prompt carries no loss
        assert not row["loss_mask"][ids == image_id].any()
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
    step_s = {"min": 0.9, "median": 1.0, "max": 1.2, "runs": 5}
    figures = {"tokens_per_s": 100.0, "peak_mem_mb": 1000.0, "step_s": step_s, "added_mem_mb": 200.0,
               "mem_above_baseline_mb": 100.0, "first_loss": 0.1}  # fmt: skip
    extra = {"real_tokens": 100, "micro_batches": 2, "threads_per_rank": 1}
    halved = {"tokens_per_s": 150.0, "peak_mem_mb": 800.0, "mem_above_baseline_mb": 50.0}
    per_layout = {"1x1x1": {**figures, **extra}, "2x1x1": {**figures, **extra, **halved}}
    result = summarise(per_layout, backend="gloo")
    assert result["layouts"] == ["1x1x1", "2x1x1"]
    assert result["speedup_vs_single"]["2x1x1"] == pytest.approx(1.5)
    assert result["mem_vs_single"]["2x1x1"] == pytest.approx(0.8)
    assert result["mem_above_baseline_vs_single"]["2x1x1"] == pytest.approx(0.5)
    assert result["step_s"]["2x1x1"] == step_s
    merged = merge([result, {**summarise({"1x1x1": {**figures, **extra, "tokens_per_s": 400.0}}), "backend": "nccl"}])
    assert merged["runs"] == ["gloo:1x1x1", "gloo:2x1x1", "nccl:1x1x1"]
    assert merged["speedup_vs_gloo"] == {"nccl:1x1x1": pytest.approx(4.0)}
