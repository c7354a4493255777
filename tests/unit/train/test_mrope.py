"""``sequence_mrope`` / ``window_mrope``: equal to each model family's own ``get_rope_index`` (the tiny
Qwen2-VL, Qwen2.5-VL and Qwen3-VL builds)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from tests.helpers.records import seq_meta
from vlrl.pack.layout import Layout
from vlrl.pack.plan import MicroBatch
from vlrl.records import MMItemMeta, SeqMeta, image_store_key
from vlrl.train.mrope import sequence_mrope, window_mrope

MERGE = 2
PATCH = 14
GRIDS = {"A": (1, 4, 4), "B": (1, 6, 8), "C": (1, 8, 4)}  # 4, 12 and 8 LLM tokens


def _image(name: str, grid: tuple[int, int, int] | None = None) -> MMItemMeta:
    t, h, w = grid or GRIDS[name]
    digest = hashlib.md5(name.encode()).hexdigest()
    return MMItemMeta(
        content_hash=digest,
        width=w * PATCH,
        height=h * PATCH,
        nbytes=w * PATCH * h * PATCH * 3,
        store_key=image_store_key(digest),
        grid_thw=(t, h, w),
        num_tokens=t * h * w // MERGE**2,
    )


def _seq(key: str, num_tokens: int, images=(), image_offsets=()) -> SeqMeta:
    return seq_meta(key, num_tokens, images=tuple(images), image_offsets=tuple(image_offsets))


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def model(request, tmp_path_factory):
    from vlrl.models import build_tiny, family

    return family(request.param).load(build_tiny(request.param, tmp_path_factory.mktemp(request.param))).eval()


def _build(model, layout: str, key: str = "seq/0", seed: int = 0) -> tuple[SeqMeta, np.ndarray]:
    """Parse ``layout`` ("5 [A] 3 B": text runs, bracketed images wrapped in vision_start/end as
    the chat template does, bare images); return the record and ``get_rope_index``'s (3, T)."""
    config = model.config
    specials = {config.image_token_id, config.video_token_id, config.vision_start_token_id, config.vision_end_token_id}
    rng = np.random.default_rng(seed)
    ids: list[int] = []
    names: list[str] = []  # unique images, in order of first occurrence
    offsets = []
    for part in layout.split():
        if part.isdigit():
            text = rng.integers(0, config.text_config.vocab_size, 3 * int(part))
            ids += [int(i) for i in text if i not in specials][: int(part)]
            continue
        name = part.strip("[]")
        if name not in names:
            names.append(name)
        if part.startswith("["):
            ids.append(config.vision_start_token_id)
        offsets.append((len(ids), names.index(name)))
        ids += [config.image_token_id] * _image(name).num_tokens
        if part.endswith("]"):
            ids.append(config.vision_end_token_id)
    meta = _seq(key, len(ids), [_image(n) for n in names], offsets)
    input_ids = torch.tensor([ids])  # (1, T)
    grids = torch.tensor([GRIDS[names[i]] for _, i in offsets]) if offsets else None
    with torch.no_grad():
        expected, _ = model.model.get_rope_index(
            input_ids, mm_token_type_ids=(input_ids == config.image_token_id).int(), image_grid_thw=grids
        )  # (3, 1, T)
    return meta, expected[:, 0].numpy()


LAYOUTS = [
    "7",  # text only
    "[A] 5",  # image first (after vision_start)
    "A 5",  # image at the very first token
    "6 [B]",  # image last (vision_end closes the sequence)
    "6 B",  # image at the very last token
    "B",  # nothing but an image
    "4 [A] 3 [B] 2",  # two images
    "3 [C] 2 [A] 1 [C] 4",  # a repeated image
    "2 [B] [C] [A] 1",  # images separated only by their vision markers
    "1 [C] 9 [B] 2 [B] 3 [A] 5 [C]",  # many, repeated, last
]


def test_tiny_model_merge_size(model):
    assert model.config.vision_config.spatial_merge_size == MERGE


@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_get_rope_index(model, layout):
    meta, expected = _build(model, layout)
    got = sequence_mrope(meta, MERGE)
    assert got.dtype == np.int64 and got.shape == (3, meta.num_tokens)
    np.testing.assert_array_equal(got, expected)


def test_matches_get_rope_index_random_layouts(model):
    rng = np.random.default_rng(1)
    for seed in range(20):
        parts = []
        for _ in range(rng.integers(1, 6)):
            parts.append(str(rng.integers(1, 8)))
            parts.append(f"[{rng.choice(list(GRIDS))}]")
        layout = " ".join(parts[rng.integers(0, 2) :] + [str(rng.integers(1, 4))] * rng.integers(0, 2))
        meta, expected = _build(model, layout, seed=seed)
        np.testing.assert_array_equal(sequence_mrope(meta, MERGE), expected, err_msg=layout)


def test_by_hand():
    """2 text, an image of LLM grid 1 x 2 x 3 at offset 2, 2 text."""
    meta = _seq("s", 10, [_image("X", (1, 4, 6))], [(2, 0)])
    expected = [
        [0, 1, 2, 2, 2, 2, 2, 2, 5, 6],
        [0, 1, 2, 2, 2, 3, 3, 3, 5, 6],
        [0, 1, 2, 3, 4, 2, 3, 4, 5, 6],
    ]
    np.testing.assert_array_equal(sequence_mrope(meta, MERGE), expected)


def test_offsets_in_any_order():
    images = [_image("A"), _image("B")]
    ordered = _seq("s", 30, images, [(2, 0), (10, 1)])
    shuffled = _seq("s", 30, images, [(10, 1), (2, 0)])
    np.testing.assert_array_equal(sequence_mrope(ordered, MERGE), sequence_mrope(shuffled, MERGE))


def _bare(grid, num_tokens):
    digest = "0" * 32
    return MMItemMeta(
        content_hash=digest,
        width=28,
        height=28,
        nbytes=28 * 28 * 3,
        store_key=image_store_key(digest),
        grid_thw=grid,
        num_tokens=num_tokens,
    )


@pytest.mark.parametrize(
    "images, offsets, num_tokens, match",
    [
        ([_image("A")], [(2, 0), (4, 0)], 20, "occurrence 1 .* overlaps"),
        ([_image("A"), _image("B")], [(0, 1), (5, 0)], 20, "occurrence 1 .* overlaps"),
        ([_image("B")], [(10, 0)], 20, "occurrence 0 .* runs past"),
        ([_bare(None, None)], [(0, 0)], 20, "grid_thw=None"),
        ([_bare((1, 3, 4), 3)], [(0, 0)], 20, "divisible by merge_size=2"),
        ([_bare((2, 4, 4), 8)], [(0, 0)], 20, "expected t=1"),
        ([_bare((1, 4, 4), 16)], [(0, 0)], 20, "num_tokens=16"),
    ],
)
def test_errors_name_sequence_and_image(images, offsets, num_tokens, match):
    meta = _seq("seq/bad", num_tokens, images, offsets)
    with pytest.raises(ValueError, match=match) as error:
        sequence_mrope(meta, MERGE)
    assert "'seq/bad'" in str(error.value) and "images[" in str(error.value)


@pytest.mark.parametrize("merge_size", [0, -2, 2.0, True])
def test_bad_merge_size(merge_size):
    with pytest.raises(ValueError, match="merge_size"):
        sequence_mrope(_seq("s", 3), merge_size)


# ---- windows


@pytest.fixture(scope="module")
def packed():
    """Three sequences and their tables, as a micro-batch packs them."""
    metas = [
        _seq("k/0", 25, [_image("A"), _image("B")], [(3, 0), (10, 1)]),
        _seq("k/1", 9),
        _seq("k/2", 30, [_image("C")], [(0, 0), (15, 0)]),
    ]
    tables = {m.key: sequence_mrope(m, MERGE) for m in metas}
    batch = MicroBatch(tuple(m.key for m in metas), tuple(m.num_tokens for m in metas), cost=0.0)
    return batch, tables


def _expected(batch, tables, segment_ids, position_ids):
    out = np.zeros((3, len(segment_ids)), dtype=np.int64)
    for i, (s, p) in enumerate(zip(segment_ids, position_ids)):
        if s >= 0:
            out[:, i] = tables[batch.keys[s]][:, p]
    return out


@pytest.mark.parametrize("cp", [1, 2, 3])
def test_window_of_cp_ranks(packed, cp):
    """Windows cut as the packer cuts them: each CP rank's chunks, pad tail last."""
    batch, tables = packed
    layout = Layout(dp=1, cp=cp, tp=1)
    for rank in range(cp):
        window_len = layout.window_len(batch.num_tokens)
        segment_ids = np.full(window_len, -1, dtype=np.int32)
        position_ids = np.zeros(window_len, dtype=np.int32)
        for r in batch.cp_ranges(rank, layout):
            stop = r.window_start + r.stop - r.start
            segment_ids[r.window_start : stop] = batch.keys.index(r.key)
            position_ids[r.window_start : stop] = np.arange(r.start, r.stop)
        got = window_mrope(tables, batch.keys, segment_ids, position_ids)
        assert got.shape == (3, window_len) and got.dtype == np.int64
        np.testing.assert_array_equal(got, _expected(batch, tables, segment_ids, position_ids))


def test_window_arbitrary(packed):
    batch, tables = packed
    rng = np.random.default_rng(0)
    for _ in range(5):
        segment_ids = rng.integers(-1, 3, 40)
        position_ids = np.array([rng.integers(0, batch.lengths[s]) if s >= 0 else 0 for s in segment_ids])
        got = window_mrope(tables, batch.keys, segment_ids, position_ids)
        np.testing.assert_array_equal(got, _expected(batch, tables, segment_ids, position_ids))


def test_window_needs_only_its_sequences(packed):
    batch, tables = packed
    only = {"k/1": tables["k/1"]}
    got = window_mrope(only, batch.keys, np.array([1, 1, -1]), np.array([4, 8, 0]))
    np.testing.assert_array_equal(got, [[4, 8, 0]] * 3)


def test_window_all_padding(packed):
    batch, tables = packed
    got = window_mrope(tables, batch.keys, np.full(4, -1), np.zeros(4, dtype=np.int32))
    np.testing.assert_array_equal(got, np.zeros((3, 4)))


@pytest.mark.parametrize(
    "segment_ids, position_ids, error, match",
    [
        ([0, 3], [0, 0], ValueError, "segment_ids holds 3"),
        ([0, -2], [0, 0], ValueError, "segment_ids holds -2"),
        ([1, 1], [0, 9], ValueError, "position_ids holds 9 for sequence 'k/1' of 9 tokens"),
        ([2, 2], [-1, 0], ValueError, "position_ids holds -1 for sequence 'k/2'"),
        ([0, 1], [0], ValueError, "expected equal"),
    ],
)
def test_window_errors(packed, segment_ids, position_ids, error, match):
    batch, tables = packed
    with pytest.raises(error, match=match):
        window_mrope(tables, batch.keys, np.array(segment_ids), np.array(position_ids))


def test_window_missing_table(packed):
    batch, tables = packed
    with pytest.raises(KeyError, match="'k/2'"):
        window_mrope({"k/0": tables["k/0"]}, batch.keys, np.array([0, 2]), np.array([0, 0]))
