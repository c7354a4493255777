"""``StepEncoder`` across real processes: 4 gloo ranks reading a RayStore, with a real encoder
(the Qwen2-VL tower plug-in), for DP x CP x TP = 1x2x2, 2x2x1 and 2x1x2.

Every rank's embeddings of every micro-batch must equal a single-process encode read off the
packer's window (``cut_window(...).tp_shard``), and encoder gradients summed over ranks must equal
those of a single-process loss that encodes every occurrence separately: so an image shown many
times (group members share their first screenshot) is encoded once yet gets the summed gradient.
Each rank must read from the store the pixels of exactly the images it encodes.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from encoders.protocol import EncoderError
from encoders.qwen2vl import Qwen2VLEncoder
from tests.helpers.records import seq_meta
from vlrl.mm import PatchRule, store_image
from vlrl.pack import Layout, MicroBatchPlanner, cut_window
from vlrl.records import SeqMeta, fields_for
from vlrl.store import LocalStore
from vlrl.store.errors import KeyMissingError
from vlrl.train.encode_step import StepEncoder
from vlrl.train.step_images import step_images

WORLD = 4
LAYOUTS = [(1, 2, 2), (2, 2, 1), (2, 1, 2)]
RULE = PatchRule(min_pixels=28 * 28, max_pixels=168 * 168)
IMAGE_TOKEN = 7


def make_encoder() -> Qwen2VLEncoder:
    torch.manual_seed(0)
    fields = dict(Qwen2VLEncoder.check_fields, patch_rule=RULE)
    return Qwen2VLEncoder.Config(**fields).build().double()


def make_step(store, seed: int = 0) -> list[SeqMeta]:
    """Sequences of 4-member groups: members share their first screenshot, later screens differ,
    one screen recurs across groups; several screenshots per sequence, of mixed sizes."""
    rng = np.random.default_rng(seed)
    sizes = [(56, 56), (84, 140), (168, 112), (56, 168), (112, 112)]

    def screenshot(k: int):
        h, w = sizes[k % len(sizes)]
        pixels = np.random.default_rng(1000 + k).integers(0, 256, (h, w, 3), dtype=np.uint8)
        return store_image(store, pixels, holder="workload", rule=RULE)

    common = screenshot(99)
    metas = []
    for g in range(3):
        first = screenshot(10 * g)
        for member in range(4):
            shots = [first, screenshot(10 * g + 1 + member), common]
            at, length, offsets = 2, 0, []
            for index, item in enumerate(shots):
                offsets.append((at, index))
                at += item.num_tokens + int(rng.integers(3, 20))
            length = at + int(rng.integers(1, 10))
            key = f"enc/g{g}m{member}"
            tokens = rng.integers(10, 100, length).astype(np.int32)
            for (offset, index) in offsets:
                tokens[offset : offset + shots[index].num_tokens] = IMAGE_TOKEN
            mask = np.zeros(length, bool)
            mask[-5:] = True
            store.put(key, {
                "token_ids": tokens,
                "logprobs": np.zeros(length, np.float32),
                "loss_mask": mask,
                "advantages": np.zeros(length, np.float32),
            })  # fmt: skip
            metas.append(seq_meta(
                key, length, group_id=f"g{g}", sample_index=member, turns=3, num_response_tokens=5,
                images=tuple(shots), image_offsets=tuple(offsets),
            ))  # fmt: skip
    return metas


PACKED = fields_for({"policy_gradient"})
"""The fields the rows hold, packed into the windows whose image placements the test reads."""


def plan_step(metas, layout: Layout):
    return MicroBatchPlanner.Config(max_tokens_per_micro_batch=400).build().plan(metas, layout.dp)


def expected_rows(store, metas, plan, layout: Layout, rank: int, micro_batch: int, encoder) -> torch.Tensor:
    """What ``rank`` must hold for a micro-batch, read off the packer's window: every occurrence
    encoded on its own (no dedup), cut by the window's image placements."""
    dp, cp, tp = layout.coords(rank)
    by_key = {m.key: m for m in metas}
    window = cut_window(store, layout, plan.ranks[dp][micro_batch], cp, by_key, PACKED).tp_shard(layout, tp)
    rows = []
    for placement in window.images:
        meta = by_key[placement.seq_key]
        item = meta.images[meta.image_offsets[placement.occurrence][1]]
        pixels = store.get([item.store_key], ["pixels"])[item.store_key]["pixels"]
        inputs = encoder.preprocess(np.asarray(pixels))
        out = encoder(encoder.collate([inputs]))
        rows.append(out[placement.row_start : placement.row_start + placement.num_rows])
    return torch.cat(rows) if rows else torch.zeros(0, encoder.hidden_size, dtype=torch.float64)


def loss_weights(shape: tuple, rank: int, micro_batch: int, layout: Layout) -> torch.Tensor:
    seed = hash((layout.dp, layout.cp, layout.tp, rank, micro_batch)) % 2**31
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _rank_main(rank: int, address: str, namespace: str, rdzv: str) -> None:
    import ray

    from vlrl.store.ray_store import RayStore

    ray.init(address=address, log_to_driver=False, configure_logging=False)
    store = RayStore.Config(namespace=namespace, image_tile_px=None).build()  # bytes read are pixel bytes
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=WORLD, timeout=timedelta(seconds=120))
    metas = [SeqMeta(**m) for m in _load_metas(store)]
    try:
        for shape in LAYOUTS:
            _check_layout(Layout(*shape), store, metas, rank)
        dist.barrier()
    finally:
        dist.destroy_process_group()
        ray.shutdown()


def _check_layout(layout: Layout, store, metas, rank: int) -> None:
    plan = plan_step(metas, layout)
    images = step_images(plan, layout, {m.key: m for m in metas})
    encoder = make_encoder()
    step_encoder = StepEncoder(encoder, store, layout, rank, chunk_tokens=40)
    before = store.io_stats().bytes_read
    encoded = step_encoder.encode(images)
    fetched = store.io_stats().bytes_read - before
    step_encoder.close()
    where = f"{layout} rank {rank}"

    # Lazy fetch: this rank read the pixels of its own images and nothing else.
    mine = [encoded.plan.hashes[i] for i in encoded.plan.items_of(rank)]
    nbytes = {item.content_hash: item.nbytes for item in images.items}
    assert fetched == encoded.stats.pixel_bytes == sum(nbytes[h] for h in mine), where
    # Each distinct image is encoded once in the whole step, on one rank.
    everyone: list[list[str]] = [None] * WORLD  # type: ignore[list-item]
    dist.all_gather_object(everyone, mine)
    flat = [h for hashes in everyone for h in hashes]
    assert sorted(flat) == sorted(nbytes), where
    assert len(images.items) > len(nbytes), "the workload must repeat images"

    # Forward: every micro-batch's rows equal a single-process encode, in window order.
    reference = make_encoder()
    reference_loss = torch.zeros((), dtype=torch.float64)
    for i in range(plan.num_micro_batches):
        got = encoded.embeddings(i)
        want = expected_rows(store, metas, plan, layout, rank, i, reference)
        assert got.shape == want.shape, (where, i, got.shape, want.shape)
        torch.testing.assert_close(got, want.detach(), msg=lambda m: f"{where} mb{i}: {m}")
        weights = loss_weights(got.shape, rank, i, layout)
        (got * weights).sum().backward()
        reference_loss = reference_loss + (want * weights).sum()
    encoded.backward()
    if reference_loss.requires_grad:
        reference_loss.backward()

    # Backward: encoder grads summed over ranks equal those of every rank's loss encoded
    # occurrence by occurrence (each rank's share of that loss summed the same way).
    for model in (encoder, reference):
        for param in model.parameters():
            if param.grad is None:
                param.grad = torch.zeros_like(param)
            dist.all_reduce(param.grad)
    for (name, got), want in zip(encoder.named_parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, msg=lambda m: f"{where} grad {name}: {m}")


def _load_metas(store) -> list[dict]:
    import pickle

    return pickle.loads(store.get(["enc/metas"], ["blob"])["enc/metas"]["blob"].tobytes())


def test_step_encoder_matches_single_process(ray_session, tmp_path):
    import dataclasses
    import pickle

    from vlrl.store.ray_store import RayStore

    namespace = f"encode-{uuid.uuid4().hex[:8]}"
    store = RayStore.Config(namespace=namespace, image_tile_px=None).build()  # bytes read are pixel bytes
    try:
        metas = make_step(store)
        blob = pickle.dumps([{f.name: getattr(m, f.name) for f in dataclasses.fields(m)} for m in metas])
        store.put("enc/metas", {"blob": np.frombuffer(blob, np.uint8)})
        address = ray_session.get_runtime_context().gcs_address
        mp.spawn(_rank_main, args=(address, namespace, str(tmp_path / "rdzv")), nprocs=WORLD, join=True)
    finally:
        store.destroy()


# ---- one process: plans and errors --------------------------------------------------------------


def test_pieces_follow_the_packers_windows():
    """The routing's buffer order is the packer's window order, on every rank of every layout."""
    store = LocalStore()
    metas = make_step(store)
    by_key = {m.key: m for m in metas}
    for shape in [*LAYOUTS, (1, 4, 1), (2, 1, 1), (1, 1, 4)]:
        layout = Layout(*shape)
        plan = plan_step(metas, layout)
        images = step_images(plan, layout, by_key)
        for i, mb_images in enumerate(images.micro_batches):
            for rank in range(layout.world_size):
                dp, cp, tp = layout.coords(rank)
                window = cut_window(store, layout, plan.ranks[dp][i], cp, by_key, PACKED).tp_shard(layout, tp)
                pieces = sorted((p for p in mb_images.pieces if p.dest_rank == rank), key=lambda p: p.dest_offset)
                hashes = [by_key[w.seq_key].images[by_key[w.seq_key].image_offsets[w.occurrence][1]].content_hash for w in window.images]
                assert [(p.content_hash, p.row_start, p.num_rows) for p in pieces] == [
                    (h, w.row_start, w.num_rows) for h, w in zip(hashes, window.images, strict=True)
                ], (shape, i, rank)


def test_missing_pixels_name_the_rank_and_image():
    store = LocalStore()
    metas = make_step(store)
    layout = Layout(1)
    images = step_images(plan_step(metas, layout), layout, {m.key: m for m in metas})
    lost = metas[0].images[1]
    store.delete([lost.store_key])
    encoder = StepEncoder(make_encoder(), store, layout, 0)
    with pytest.raises(KeyMissingError, match=f"rank 0: pixels of image.*{lost.content_hash}"):
        encoder.encode(images)
    encoder.close()


def test_metadata_disagreeing_with_the_encoder_names_the_item():
    store = LocalStore()
    metas = make_step(store)
    wrong_rule = PatchRule(min_pixels=28 * 28, max_pixels=56 * 56)  # fewer tokens than RULE gives
    layout = Layout(1)
    images = step_images(plan_step(metas, layout), layout, {m.key: m for m in metas})
    encoder = make_encoder()
    encoder.preprocess = _with_rule(encoder, wrong_rule)  # the deployed processor changed under the metadata
    step_encoder = StepEncoder(encoder, store, layout, 0)
    with pytest.raises(EncoderError, match=r"image [0-9a-f]{12} .*rank 0: preprocess gives \d+ rows, the metadata says"):
        step_encoder.encode(images)
    step_encoder.close()


def _with_rule(encoder: Qwen2VLEncoder, rule: PatchRule):
    other = Qwen2VLEncoder.Config(**dict(Qwen2VLEncoder.check_fields, patch_rule=rule)).build()
    return other.preprocess


def test_a_layout_other_than_the_encoders_is_refused():
    store = LocalStore()
    metas = make_step(store)
    images = step_images(plan_step(metas, Layout(2)), Layout(2), {m.key: m for m in metas})
    encoder = StepEncoder(make_encoder(), store, Layout(1, 2), 0)
    with pytest.raises(ValueError, match=r"rank 0: step images were placed for Layout\(dp=2"):
        encoder.plan(images)
    encoder.close()
    with pytest.raises(ValueError, match="the plan has 2 DP ranks but the layout"):
        step_images(plan_step(metas, Layout(2)), Layout(1, 2), {m.key: m for m in metas})
