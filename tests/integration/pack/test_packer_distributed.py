"""TP-group packer across real processes: 4 gloo ranks, rows in a RayStore, layouts DP x CP x TP
of 1x2x2 and 2x2x1.

The parent writes the rows; each spawned rank connects to the same Ray cluster, rebuilds the
store from its config (a namespace names the same store everywhere), and asks
``packer_for_rank(...).get(i)`` for every micro-batch. Every rank's window must equal the dense
reference cut; each TP group must read the store once (its leader) and map one segment.
"""

from __future__ import annotations

import gc
import os
import pickle
import re
import uuid
from datetime import timedelta

import numpy as np
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.unit.pack.test_packer import STORED, assert_matches, assert_shards_match, make_plan, make_rows, reference_window
from vlrl.pack import Layout, PackedWindow, new_tp_group, packer_for_rank
from vlrl.records import ADVANTAGES

WORLD = 4
LAYOUTS = [(1, 2, 2), (2, 2, 1)]
CHUNK_ROWS = 16


def _rank_main(rank: int, address: str, namespace: str, rdzv: str, out_dir: str) -> None:
    import ray

    from vlrl.store.ray_store import RayStore

    ray.init(address=address, log_to_driver=False, configure_logging=False)
    store = RayStore.Config(namespace=namespace, chunk_rows=CHUNK_ROWS).build()
    timeout = timedelta(seconds=60)
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=WORLD, timeout=timeout)
    metas, _ = make_rows()
    results = {}
    for shape in LAYOUTS:
        layout = Layout(*shape)
        plan = make_plan(metas, layout.dp)
        tp_group = new_tp_group(layout)
        packer = packer_for_rank(
            rank, store=store, layout=layout, plan=plan, metas=metas, tp_group=tp_group, fields=STORED
        )
        for i in range(plan.num_micro_batches):
            before = store.io_stats().bytes_read
            window = packer.get(i)
            segments = _segment_mappings()
            dist.barrier()  # every leader is past get(): it has unlinked its segment's name
            results[shape, i] = {
                "arrays": {name: np.array(a) for name, a in window.arrays().items()},
                "num_tokens": window.num_tokens,
                "images": window.images,
                "writeable": any(a.flags.writeable for a in window.arrays().values()),
                "bytes_read": store.io_stats().bytes_read - before,
                "segments": segments,
                "named": [os.path.exists(path) for _, path in segments],
            }
            del window
            gc.collect()
            results[shape, i]["left_mapped"] = _segment_mappings()
    # A leader that cannot pack (here: it lacks a sequence's metadata) fails its whole TP group.
    layout = Layout(1, 2, 2)
    plan = make_plan(metas, 1)
    first = plan.ranks[0][0].keys[0]
    rest = [m for m in metas if m.key != first]
    broken = packer_for_rank(
        rank, store=store, layout=layout, plan=plan, metas=rest, tp_group=new_tp_group(layout), fields=STORED
    )
    try:
        broken.get(0)
    except Exception as error:
        results["error"] = f"{type(error).__name__}: {error}"
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(results, f)
    dist.destroy_process_group()
    ray.shutdown()


def _segment_mappings() -> list[tuple[str, str]]:
    """(device:inode, path) of every packer segment this process maps."""
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            match = re.search(r" (\S+:\S+) (\d+) +(/dev/shm/vlrl-pack-\S+)", line)
            if match:
                found.add((f"{match[1]}:{match[2]}", match[3]))
    return sorted(found)


@pytest.fixture(scope="module")
def ranks(ray_session, tmp_path_factory):
    """``(metas, rows, store config, per-rank results)`` of one 4-process run over both layouts."""
    from vlrl.store.ray_store import RayStore

    metas, rows = make_rows()
    namespace = f"packer-{uuid.uuid4().hex[:8]}"
    store = RayStore.Config(namespace=namespace, chunk_rows=CHUNK_ROWS).build()
    for key, fields in rows.items():
        store.put(key, {k: v for k, v in fields.items() if k != ADVANTAGES})
        store.add_fields(key, {ADVANTAGES: fields[ADVANTAGES]})
    out = tmp_path_factory.mktemp("packer-ranks")
    address = ray_session.get_runtime_context().gcs_address
    try:
        mp.spawn(_rank_main, args=(address, namespace, str(out / "rdzv"), str(out)), nprocs=WORLD, join=True)
        results = []
        for rank in range(WORLD):
            with open(out / f"rank{rank}.pkl", "rb") as f:
                results.append(pickle.load(f))
    finally:
        store.destroy()
    return metas, rows, results


@pytest.fixture(params=LAYOUTS, ids=lambda s: "x".join(map(str, s)))
def shape(request):
    return request.param


def test_every_rank_holds_the_reference_window(ranks, shape):
    metas, rows, results = ranks
    layout = Layout(*shape)
    plan = make_plan(metas, layout.dp)
    for rank in range(WORLD):
        dp_rank, cp_rank, tp_rank = layout.coords(rank)
        for i, mb in enumerate(plan.ranks[dp_rank]):
            got = results[rank][shape, i]
            window = PackedWindow.from_arrays(got["arrays"], num_tokens=got["num_tokens"], images=got["images"])
            ref = reference_window(rows, metas, mb, layout, cp_rank)
            where = f"rank {rank} (dp{dp_rank} cp{cp_rank} tp{tp_rank}) mb{i}"
            assert_matches(window, ref, metas, where)
            assert_shards_match(window, ref, layout, metas, where)
            assert not got["writeable"], where


def test_one_store_reader_and_one_segment_per_tp_group(ranks, shape):
    metas, _, results = ranks
    layout = Layout(*shape)
    for i in range(make_plan(metas, layout.dp).num_micro_batches):
        inodes = set()
        for leader in range(0, WORLD, layout.tp):
            group = layout.tp_group(leader)
            got = [results[rank][shape, i] for rank in group]
            assert got[0]["bytes_read"] > 0
            assert [g["bytes_read"] for g in got[1:]] == [0] * (layout.tp - 1)  # followers never read the store
            assert all(len(g["segments"]) == 1 for g in got)  # one mapping of one segment per rank
            assert len({g["segments"][0][0] for g in got}) == 1  # the same inode: one copy per TP group
            assert not any(name for g in got for name in g["named"])  # unlinked once every rank had mapped it
            assert all(g["left_mapped"] == [] for g in got)  # freed after the micro-batch
            inodes.add(got[0]["segments"][0][0])
        assert len(inodes) == layout.world_size // layout.tp  # a segment per TP group


def test_each_tp_group_fetches_its_window_and_chunk_rounding_only(ranks, shape):
    metas, rows, results = ranks
    layout = Layout(*shape)
    plan = make_plan(metas, layout.dp)
    row_bytes = sum(a[:1].nbytes for a in rows[metas[0].key].values())  # every field of one token
    for leader in range(0, WORLD, layout.tp):
        dp_rank, cp_rank, _ = layout.coords(leader)
        for i, mb in enumerate(plan.ranks[dp_rank]):
            ranges = mb.cp_ranges(cp_rank, layout)
            window_bytes = sum(r.stop - r.start for r in ranges) * row_bytes
            # rows of the chunks each range overlaps: from its first chunk's start to its last one's end
            chunked = sum(
                min(-(-r.stop // CHUNK_ROWS) * CHUNK_ROWS, len(rows[r.key]["token_ids"]))
                - r.start // CHUNK_ROWS * CHUNK_ROWS
                for r in ranges
            )
            moved = results[leader][shape, i]["bytes_read"]
            assert moved == chunked * row_bytes  # exactly the chunks the window overlaps
            assert window_bytes <= moved <= window_bytes + len(ranges) * 2 * (CHUNK_ROWS - 1) * row_bytes


def test_a_leader_that_cannot_pack_fails_its_whole_tp_group(ranks):
    _, _, results = ranks
    errors = [results[rank].get("error", "no error") for rank in range(WORLD)]
    for leader in (0, 2):
        assert errors[leader].startswith("ValueError: no SeqMeta for sequence"), errors[leader]
        follower = errors[leader + 1]
        assert follower.startswith(f"PackError: rank {leader + 1}: TP leader rank {leader} failed to pack"), follower
        assert "no SeqMeta for sequence" in follower
