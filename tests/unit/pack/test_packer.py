"""TP-group packer in one process: every CP window (and TP shard) equals the same cut of a dense
reference micro-batch, only the window's rows move, and the shared copy is read-only and freed.

The workload and the reference live here; ``test_packer_distributed`` reuses them across processes.
"""

from __future__ import annotations

import gc
import os
from dataclasses import replace

import numpy as np
import pytest

from vlrl.pack import (
    PAD_SEGMENT_ID,
    PAD_TOKEN_ID,
    Layout,
    MicroBatchPlanner,
    PackedWindow,
    Plan,
    TPGroupPacker,
    cut_window,
    packer_for_rank,
    shared,
)
from vlrl.records import ADVANTAGES, LOGPROBS, MMItemMeta, SeqMeta, fields_for, image_store_key
from vlrl.store import LocalStore

IMAGE_TOKEN = 151_655
EXTRA = "extra/routing"
STORED = fields_for({"policy_gradient", "distillation"})
"""Every per-token field the rows hold, all of them packed; a window array has its field's name."""
LAYOUTS = [(1, 1, 1), (1, 2, 2), (2, 2, 1), (1, 4, 1), (2, 2, 2), (1, 3, 2), (2, 1, 2)]


# ---- workload ---------------------------------------------------------------------------------


def make_rows(n: int = 12, seed: int = 0) -> tuple[list[SeqMeta], dict[str, dict[str, np.ndarray]]]:
    """``n`` GUI-agent sequences of 50-400 tokens; every other one holds screenshot token runs
    (16-120 tokens, one screenshot shown twice), with teacher logprobs and a 2-D extra field."""
    rng = np.random.default_rng(seed)
    metas, rows = [], {}
    for i in range(n):
        key = f"step/seq{i}"
        length = int(rng.integers(50, 401))
        tokens = rng.integers(1, 151_000, length).astype(np.int32)
        images, offsets = [], []
        if i % 2 == 0:
            sizes = [int(s) for s in rng.choice([16, 48, 120], size=2)]
            images = [image_meta(seed * 1000 + i * 10 + j, s) for j, s in enumerate(sizes)]
            at = 3
            for index in (0, 1, 0):  # screenshot 0 again after screenshot 1
                run = images[index].num_tokens
                if at + run > length:
                    break
                offsets.append((at, index))
                tokens[at : at + run] = IMAGE_TOKEN
                at += run + int(rng.integers(1, 30))
        mask = rng.random(length) > 0.4
        rows[key] = {
            "token_ids": tokens,
            "logprobs": -rng.exponential(1.0, length).astype(np.float32),
            "loss_mask": mask,
            "advantages": (rng.normal(size=length) * mask).astype(np.float32),
            "teacher_logprobs": -rng.exponential(1.0, length).astype(np.float32),
            EXTRA: rng.integers(0, 64, (length, 2)).astype(np.int16),
        }
        metas.append(
            SeqMeta(
                key=key,
                group_id=f"g{i // 4}",
                source="desktop",
                sample_index=i % 4,
                reward=float(i % 2),
                success=bool(i % 2),
                finish="done",
                turns=1,
                num_tokens=length,
                num_response_tokens=int(mask.sum()),
                context_lengths=(length,),
                policy_version=0,
                images=tuple(images),
                image_offsets=tuple(offsets),
                extra_fields=(EXTRA,),
            )
        )
    return metas, rows


def image_meta(seed: int, num_tokens: int) -> MMItemMeta:
    digest = f"{seed:032x}"
    return MMItemMeta(
        content_hash=digest,
        width=28 * num_tokens,
        height=28,
        nbytes=28 * 28 * num_tokens * 3,
        store_key=image_store_key(digest),
        grid_thw=(1, 2, 2 * num_tokens),
        num_tokens=num_tokens,
    )


def make_plan(metas: list[SeqMeta], dp: int, budget: int = 1200) -> Plan:
    return MicroBatchPlanner.Config(max_tokens_per_micro_batch=budget).build().plan(metas, dp)


def local_store(rows: dict[str, dict[str, np.ndarray]]) -> LocalStore:
    store = LocalStore()
    for key, fields in rows.items():
        store.put(key, {k: v for k, v in fields.items() if k != "advantages"})
        store.add_fields(key, {"advantages": fields["advantages"]})  # written later, by the accept hook
    return store


# ---- reference: a dense micro-batch, padded, then cut -----------------------------------------


def reference_window(rows, metas, micro_batch, layout: Layout, cp_rank: int) -> dict[str, np.ndarray]:
    """Every per-token array of the window, plus ``image`` (occurrence id or -1) and ``image_row``
    per token, cut from a dense padded copy of the whole micro-batch."""
    meta_of = {m.key: m for m in metas}
    names = [*STORED, EXTRA, "position_ids", "segment_ids", "image", "image_row"]
    dense: dict[str, list] = {name: [] for name in names}
    for j, key in enumerate(micro_batch.keys):
        n = meta_of[key].num_tokens
        for field in [*STORED, EXTRA]:
            dense[field].append(rows[key][field])
        dense["position_ids"].append(np.arange(n))
        dense["segment_ids"].append(np.full(n, j))
        image, image_row = np.full(n, -1), np.full(n, -1)
        for occurrence, (offset, index) in enumerate(meta_of[key].image_offsets):
            run = meta_of[key].images[index].num_tokens
            image[offset : offset + run] = j * 100 + occurrence
            image_row[offset : offset + run] = np.arange(run)
        dense["image"].append(image)
        dense["image_row"].append(image_row)
    total = micro_batch.num_tokens
    padded = layout.padded_len(total)
    pads = {"token_ids": PAD_TOKEN_ID, "segment_ids": PAD_SEGMENT_ID, "image": -1, "image_row": -1}
    full = {}
    for name, parts in dense.items():
        row_shape = (2,) if name == EXTRA else ()
        array = np.concatenate(parts) if parts else np.zeros((0, *row_shape))
        pad = np.full((padded - total, *row_shape), pads.get(name, 0), dtype=array.dtype)
        full[name] = np.concatenate([array, pad])
    full["packed_index"] = np.arange(padded)
    if layout.cp == 1:
        return full
    chunk = padded // (2 * layout.cp)
    mirror = 2 * layout.cp - 1 - cp_rank
    take = np.r_[cp_rank * chunk : (cp_rank + 1) * chunk, mirror * chunk : (mirror + 1) * chunk]
    return {name: array[take] for name, array in full.items()}


def reference_cu_seqlens(ref: dict[str, np.ndarray]) -> np.ndarray:
    """Piece starts: a new sequence, or a jump in packed position within one (the pad tail is one piece)."""
    seg, index = ref["segment_ids"], ref["packed_index"]
    starts = [
        i
        for i in range(len(seg))
        if i == 0 or seg[i] != seg[i - 1] or (seg[i] != PAD_SEGMENT_ID and index[i] != index[i - 1] + 1)
    ]
    return np.array([*starts, len(seg)], dtype=np.int32)


def placement_arrays(window: PackedWindow, metas) -> tuple[np.ndarray, np.ndarray]:
    """The window's image placements as per-token (occurrence id, image row), like the reference."""
    segment_of = {}
    image, image_row = np.full(len(window), -1), np.full(len(window), -1)
    meta_of = {m.key: m for m in metas}
    for p in window.images:
        j = int(window.segment_ids[p.window_start])
        segment_of[p.seq_key] = j
        offset, index = meta_of[p.seq_key].image_offsets[p.occurrence]
        assert p.image_key == meta_of[p.seq_key].images[index].store_key
        assert (image[p.window_start : p.window_start + p.num_rows] == -1).all()  # no overlap
        image[p.window_start : p.window_start + p.num_rows] = j * 100 + p.occurrence
        image_row[p.window_start : p.window_start + p.num_rows] = np.arange(p.row_start, p.row_start + p.num_rows)
    return image, image_row


def assert_matches(window: PackedWindow, ref: dict[str, np.ndarray], metas, where: str) -> None:
    assert len(window) == len(ref["token_ids"]), where
    for name in [*STORED, "position_ids", "segment_ids"]:
        actual = getattr(window, name)
        np.testing.assert_array_equal(actual, ref[name].astype(actual.dtype), err_msg=f"{where}: {name}")
    np.testing.assert_array_equal(window.extras[EXTRA], ref[EXTRA], err_msg=f"{where}: {EXTRA}")
    np.testing.assert_array_equal(window.cu_seqlens, reference_cu_seqlens(ref), err_msg=f"{where}: cu_seqlens")
    image, image_row = placement_arrays(window, metas)
    np.testing.assert_array_equal(image, ref["image"], err_msg=f"{where}: image placements")
    np.testing.assert_array_equal(image_row, ref["image_row"], err_msg=f"{where}: image rows")
    assert window.num_tokens == int((ref["segment_ids"] != PAD_SEGMENT_ID).sum()), where


def assert_shards_match(window: PackedWindow, ref: dict[str, np.ndarray], layout: Layout, metas, where: str) -> None:
    for tp_rank in range(layout.tp):
        start, stop = layout.tp_shard(len(window), tp_rank)
        shard = window.tp_shard(layout, tp_rank)
        assert np.shares_memory(shard.token_ids, window.token_ids) or len(shard) == 0  # a view, not a copy
        assert_matches(shard, {k: v[start:stop] for k, v in ref.items()}, metas, f"{where} tp{tp_rank}")


# ---- tests ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def step():
    metas, rows = make_rows()
    return metas, rows, local_store(rows)


def test_workload_covers_images_cut_by_window_borders(step):
    metas, rows, store = step
    layout = Layout(1, 2, 2)
    plan = make_plan(metas, 1)
    partial = [
        p
        for i, mb in enumerate(plan.ranks[0])
        for cp_rank in range(2)
        for p in cut_window(store, layout, mb, cp_rank, {m.key: m for m in metas}, STORED).images
        if p.row_start > 0 or p.num_rows < int(np.sum(rows[p.seq_key]["token_ids"] == IMAGE_TOKEN))
    ]
    assert partial  # the cases the placements exist for


@pytest.mark.parametrize("shape", LAYOUTS, ids=lambda s: "x".join(map(str, s)))
def test_every_window_equals_the_dense_reference_cut(step, shape):
    metas, rows, store = step
    layout = Layout(*shape)
    plan = make_plan(metas, layout.dp)
    for dp_rank in range(layout.dp):
        for cp_rank in range(layout.cp):
            group = layout.tp_group(layout.rank(dp_rank, cp_rank, 0))
            packer = TPGroupPacker.Config().build(
                store=store, layout=layout, plan=plan, metas=metas, group_ranks=group, fields=STORED
            )
            for i, mb in enumerate(plan.ranks[dp_rank]):
                where = f"dp{dp_rank} mb{i} cp{cp_rank}"
                window = packer.window(i)
                ref = reference_window(rows, metas, mb, layout, cp_rank)
                assert_matches(window, ref, metas, where)
                assert_shards_match(window, ref, layout, metas, where)


def test_padding_is_the_documented_tail():
    metas, rows = make_rows(3, seed=1)
    layout = Layout(1, 2, 1)
    plan = make_plan(metas, 1, budget=2000)
    (mb,) = plan.ranks[0]
    pad = layout.padded_len(mb.num_tokens) - mb.num_tokens
    assert pad > 0
    window = cut_window(local_store(rows), layout, mb, 0, {m.key: m for m in metas}, STORED)  # chunk 3 ends the batch
    tail = slice(len(window) - pad, None)
    assert window.num_tokens == len(window) - pad
    assert (window.token_ids[tail] == PAD_TOKEN_ID).all() and (window.segment_ids[tail] == PAD_SEGMENT_ID).all()
    assert not window.loss_mask[tail].any() and (window.position_ids[tail] == 0).all()
    assert (window.logprobs[tail] == 0).all() and (window.extras[EXTRA][tail] == 0).all()
    assert window.cu_seqlens[-2:].tolist() == [len(window) - pad, len(window)]


def test_reads_only_the_window_rows():
    metas, rows = make_rows()
    store = local_store(rows)  # LocalStore counts exactly the rows returned
    layout = Layout(1, 4, 1)
    plan = make_plan(metas, 1)
    mb = plan.ranks[0][0]
    row_bytes = sum(a[:1].nbytes for a in rows[mb.keys[0]].values())
    for cp_rank in range(4):
        before = store.io_stats().bytes_read
        window = cut_window(store, layout, mb, cp_rank, {m.key: m for m in metas}, STORED)
        assert store.io_stats().bytes_read - before == window.num_tokens * row_bytes


def test_shared_window_is_one_read_only_copy_freed_after_use(step, tmp_path):
    metas, rows, store = step
    layout = Layout(1, 2, 2)
    plan = make_plan(metas, 1)
    packer = TPGroupPacker.Config(shm_dir=str(tmp_path)).build(
        store=store, layout=layout, plan=plan, metas=metas, group_ranks=[0, 1], fields=STORED
    )
    published = packer.publish(0)
    assert os.listdir(tmp_path) == [os.path.basename(published.segment.path)]
    views = [published.attach() for _ in range(layout.tp)]  # what each TP rank maps
    shared.unlink(published.segment)
    assert os.listdir(tmp_path) == []  # the name is gone; the mapped pages stay valid
    private = packer.window(0)
    for view in views:
        for name, array in private.arrays().items():
            np.testing.assert_array_equal(view.arrays()[name], array, err_msg=name)
        assert view.images == private.images
        with pytest.raises(ValueError, match="read-only"):
            view.token_ids[0] = 1
    assert len(mappings(published.segment.path)) == layout.tp
    del views, view
    gc.collect()
    assert mappings(published.segment.path) == []  # unmapped: the memory is free


def mappings(path: str) -> list[str]:
    with open("/proc/self/maps") as maps:
        return [line for line in maps if path in line]


def test_rank_packer_without_tp_peers_unlinks_its_segment(step, tmp_path):
    metas, rows, store = step
    layout = Layout(2, 1, 1)
    plan = make_plan(metas, 2)
    config = TPGroupPacker.Config(shm_dir=str(tmp_path))
    packer = packer_for_rank(
        1, store=store, layout=layout, plan=plan, metas=metas, tp_group=None, fields=STORED, config=config
    )
    window = packer.get(0)
    assert os.listdir(tmp_path) == []
    assert_matches(window, reference_window(rows, metas, plan.ranks[1][0], layout, 0), metas, "dp1 mb0")


def test_the_likelihood_loss_packs_and_reads_no_rollout_logprobs_or_advantages(step):
    metas, rows, store = step
    layout = Layout(1, 2, 1)
    mb = make_plan(metas, 1).ranks[0][0]
    meta_of = {m.key: m for m in metas}
    sft = fields_for({"likelihood"})
    for cp_rank in range(2):
        before = store.io_stats().bytes_read
        window = cut_window(store, layout, mb, cp_rank, meta_of, sft)
        read = store.io_stats().bytes_read - before
        assert window.logprobs is None and window.advantages is None and window.teacher_logprobs is None
        full_before = store.io_stats().bytes_read
        full = cut_window(store, layout, mb, cp_rank, meta_of, STORED)
        assert read < store.io_stats().bytes_read - full_before
        np.testing.assert_array_equal(window.token_ids, full.token_ids)
    bare = LocalStore()  # a demonstration: written without advantages, packed for the likelihood
    bare.put(mb.keys[0], {k: v for k, v in rows[mb.keys[0]].items() if k not in (ADVANTAGES, LOGPROBS)})
    first = make_plan([meta_of[mb.keys[0]]], 1).ranks[0][0]
    assert cut_window(bare, Layout(1), first, 0, meta_of, sft).num_tokens == first.num_tokens
    with pytest.raises(ValueError, match="fields to pack"):
        cut_window(bare, Layout(1), first, 0, meta_of, ("pixels",))


def test_empty_micro_batch_is_an_empty_window(step):
    metas, rows, store = step
    layout = Layout(4, 2, 1)
    plan = make_plan(metas[:3], 4)  # fewer sequences than ranks: one rank trains nothing
    (empty,) = [batches[0] for batches in plan.ranks if not batches[0].keys]
    window = cut_window(store, layout, empty, 0, {}, STORED)
    assert len(window) == 0 and window.cu_seqlens.tolist() == [0] and window.images == ()


def test_errors_name_what_is_wrong(step):
    metas, rows, store = step
    layout = Layout(1, 2, 2)
    plan = make_plan(metas, 1)
    mb = plan.ranks[0][0]
    meta_of = {m.key: m for m in metas}
    build = TPGroupPacker.Config().build
    with pytest.raises(ValueError, match=r"group_ranks=\[1, 2\] is not a TP group"):
        build(store=store, layout=layout, plan=plan, metas=metas, group_ranks=[1, 2], fields=STORED)
    with pytest.raises(ValueError, match="plan is for dp=1"):
        build(store=store, layout=Layout(2, 2, 1), plan=plan, metas=metas, group_ranks=[0], fields=STORED)
    with pytest.raises(ValueError, match="shm_dir='/no/such/dir'"):
        TPGroupPacker.Config(shm_dir="/no/such/dir").build(
            store=store, layout=layout, plan=plan, metas=metas, group_ranks=[0, 1], fields=STORED
        )
    packer = build(store=store, layout=layout, plan=plan, metas=metas, group_ranks=[0, 1], fields=STORED)
    with pytest.raises(ValueError, match="micro-batch 99 out of range"):
        packer.window(99)
    with pytest.raises(ValueError, match=f"no SeqMeta for sequence '{mb.keys[0]}'"):
        cut_window(store, layout, mb, 0, {}, STORED)
    odd = {**meta_of, mb.keys[-1]: replace(meta_of[mb.keys[-1]], extra_fields=())}
    with pytest.raises(ValueError, match="must carry the same extra fields"):
        cut_window(store, layout, mb, 0, odd, STORED)
    with_image = next(m for m in metas if m.images)
    unsized = replace(with_image, images=tuple(replace(i, grid_thw=None, num_tokens=None) for i in with_image.images))
    single = make_plan([with_image], 1).ranks[0][0]
    with pytest.raises(ValueError, match="has no token count; apply the encoder's patch rule"):
        cut_window(store, Layout(1), single, 0, {with_image.key: unsized}, STORED)
    bare = LocalStore()
    bare.put(mb.keys[0], {k: v for k, v in rows[mb.keys[0]].items() if k != "advantages"})
    first = make_plan([meta_of[mb.keys[0]]], 1).ranks[0][0]
    with pytest.raises(ValueError, match=r"has no field\(s\) \['advantages'\] to pack"):
        cut_window(bare, Layout(1), first, 0, meta_of, STORED)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 2, 2), (2, 2, 1), (1, 4, 1)], ids=lambda s: "x".join(map(str, s)))
def test_a_branchs_window_reads_its_prefix_rows_from_its_root(shape):
    """Sequences 3 and 5 are branches of 1: their first rows are stored once, under 1's key, and
    the windows equal those of the sequences written whole (the prefix rows are prompt there)."""
    metas, rows = make_rows()
    root = metas[1]
    stored = {key: dict(fields) for key, fields in rows.items()}
    for i, shared in ((3, root.num_tokens // 2), (5, root.num_tokens // 3)):
        branch = metas[i]
        shared = min(shared, branch.num_tokens - 1)
        whole = rows[branch.key]
        whole["token_ids"][:shared] = rows[root.key]["token_ids"][:shared]
        for name in ("logprobs", "loss_mask", "advantages", "teacher_logprobs", EXTRA):
            whole[name][:shared] = 0  # the branch generated none of its prefix
        metas[i] = replace(
            branch, prefix_key=root.key, prefix_tokens=shared, num_response_tokens=int(whole["loss_mask"].sum())
        )
        stored[branch.key] = {name: values[shared:] for name, values in whole.items()}
    store = local_store(stored)
    layout = Layout(*shape)
    plan = make_plan(metas, layout.dp)
    meta_of = {m.key: m for m in metas}
    read_before = store.io_stats().bytes_read
    for dp_rank in range(layout.dp):
        for cp_rank in range(layout.cp):
            for i, mb in enumerate(plan.ranks[dp_rank]):
                window = cut_window(store, layout, mb, cp_rank, meta_of, STORED)
                ref = reference_window(rows, metas, mb, layout, cp_rank)
                assert_matches(window, ref, metas, f"dp{dp_rank} mb{i} cp{cp_rank}")
    # every stored row is read once, and a branch's prefix row moves only its token id (4 bytes)
    prefix_rows = metas[3].prefix_tokens + metas[5].prefix_tokens
    stored_bytes = sum(a.nbytes for fields in stored.values() for a in fields.values())
    assert store.io_stats().bytes_read - read_before == stored_bytes + 4 * prefix_rows
    row_bytes = sum(a[:1].nbytes for a in rows[root.key].values())  # 21: ids, logprobs, mask, ... extra
    assert store.stats().bytes == sum(a.nbytes for f in rows.values() for a in f.values()) - row_bytes * prefix_rows
