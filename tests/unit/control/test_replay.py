"""Replay of hard tasks: a rare success is kept, joins a later group that solved nothing as a copy
the group owns, and every kept and copied key is deleted exactly once, with its reason counted."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vlrl.config import DataSource, Replay
from vlrl.control.replay import ReplayBuffer
from vlrl.mm import store_image
from vlrl.mm.store_images import delete_sequences
from vlrl.records import SeqMeta
from vlrl.store import LocalStore

SOURCE = DataSource(name="s", replay=Replay(max_pass_rate=0.25, revisits=2, cap=2, max_age=2))


def group(store, group_id: str, successes: list[bool], version: int = 0) -> tuple[SeqMeta, ...]:
    """A stored group: one 12-token sequence per trajectory, each naming the same screenshot."""
    pixels = np.full((32, 32, 3), 9, np.uint8)
    metas = []
    for index, success in enumerate(successes):
        key = f"seq/{group_id}/{index}"
        image = store_image(store, pixels, holder=key)
        store.put(key, {"token_ids": np.arange(12, dtype=np.int32), "loss_mask": np.arange(12) >= 8,
                        "logprobs": np.full(12, -0.5, np.float32), "advantages": np.ones(12, np.float32)})  # fmt: skip
        metas.append(SeqMeta(
            key=key, group_id=group_id, source="s", sample_index=index, reward=float(success), success=success,
            finish="done", turns=1, num_tokens=12, num_response_tokens=4, context_lengths=(8,),
            policy_version=version, images=(image,), image_offsets=((1, 0),),
        ))  # fmt: skip
    return tuple(metas)


def buffer(store) -> ReplayBuffer:
    return ReplayBuffer({"s": SOURCE}, store, lambda metas: delete_sequences(store, metas))


def consume(store, replay: ReplayBuffer, task, metas) -> bool:
    """What the driver does with a trained group: the buffer takes its keys, the rest go."""
    taken, again = replay.trained(task, metas)
    delete_sequences(store, [m for m in metas if m.key not in taken])
    return again


def test_a_kept_success_joins_revisits_that_solved_nothing_and_goes_after_the_last():
    store, task = LocalStore(), ("s", 7)
    replay = buffer(store)
    first = group(store, "s/7", [False, True, False, False])
    assert consume(store, replay, task, first)  # 1 of 4: hard, kept, played again
    assert store.contains([first[1].key]) == [True] and replay.book.held == 1
    for k in (1, 2):
        fresh = group(store, f"s/7~{k}", [False] * 4, version=k)
        joined = replay.join(task, f"s/7~{k}", fresh, version=k)
        (copy,) = joined[4:]
        assert copy.replay_of == first[1].key and copy.success and copy.sample_index == 4
        assert copy.key != first[1].key and copy.group_id == f"s/7~{k}"
        row = store.get([copy.key])[copy.key]
        assert "advantages" not in row  # the joining group writes its own
        assert (row["token_ids"] == np.arange(12)).all()
        again = consume(store, replay, task, joined)
        assert again == (k == 1)  # two revisits, then the task's replay ends
    assert replay.book.report() == {"kept": 1, "held": 0, "joined": 2, "joined_tokens": 8, "deleted/revisits done": 1}
    assert store.stats().keys == 0  # kept sequence, copies and the shared screenshot: each went once


def test_a_revisit_that_solves_rarely_replaces_the_kept_success_and_one_that_solves_often_ends_it():
    store, task = LocalStore(), ("s", 3)
    replay = buffer(store)
    consume(store, replay, task, group(store, "s/3", [True, False, False, False]))
    again = group(store, "s/3~1", [False, False, False, True], version=1)
    assert replay.join(task, "s/3~1", again, version=1) == again  # it solved the task itself: no copy
    assert consume(store, replay, task, again)
    assert store.contains(["seq/s/3/0", "seq/s/3~1/3"]) == [False, True]  # the newer policy's success
    solved = group(store, "s/3~2", [True, True, False, False], version=2)
    assert not consume(store, replay, task, solved)
    assert dict(replay.book.deleted) == {"replaced": 1, "solved": 1} and store.stats().keys == 0


def test_old_successes_expire_instead_of_joining_and_the_cap_evicts_the_oldest():
    store = LocalStore()
    replay = buffer(store)
    for seed in (1, 2, 3):
        consume(store, replay, ("s", seed), group(store, f"s/{seed}", [True, False, False, False]))
    assert dict(replay.book.deleted) == {"cap": 1} and not store.contains(["seq/s/1/0"])[0]
    late = group(store, "s/2~1", [False] * 4, version=3)
    assert replay.join(("s", 2), "s/2~1", late, version=3) == late  # 3 versions old, max_age 2
    replay.untrained(("s", 2), "rejected")  # nothing: its replay already ended
    delete_sequences(store, late)
    replay.close()
    assert dict(replay.book.deleted) == {"cap": 1, "expired": 1, "run closed": 1}
    assert replay.book.held == 0 and store.stats().keys == 0


def test_a_source_without_replay_keeps_nothing():
    store = LocalStore()
    replay = ReplayBuffer({"s": DataSource(name="s")}, store, lambda metas: delete_sequences(store, metas))
    metas = group(store, "s/1", [True, False, False, False])
    assert replay.join(("s", 1), "s/1", metas, version=0) == metas
    assert replay.trained(("s", 1), metas) == (set(), False)


def test_replayed_tokens_are_exempt_from_the_batch_staleness_bound_only():
    (meta,) = group(LocalStore(), "g", [True])
    assert meta.stale_tokens(1) == 4  # sampled by version 0, the batch trains from version 1 on
    assert replace(meta, replay_of="seq/old/0").stale_tokens(1) == 0  # the replay's max_age applies


def test_a_kept_branch_joins_as_a_trajectory_of_its_own():
    """A success that was a branch of a branching source names a root of its own group; its copy
    in a later group has none there, so it joins as a trajectory played from reset would."""
    store, task = LocalStore(), ("s", 7)
    replay = buffer(store)
    root, branch, *rest = group(store, "s/7", [False, True, False, False])
    first = (root, replace(branch, branch_of=(0, 1)), *rest)
    assert consume(store, replay, task, first)
    fresh = group(store, "s/7~1", [False] * 4, version=1)
    (copy,) = replay.join(task, "s/7~1", fresh, version=1)[4:]
    assert copy.replay_of == branch.key and copy.branch_of == ()
    delete_sequences(store, [*fresh, copy])
    replay.close()
    assert store.stats().keys == 0
