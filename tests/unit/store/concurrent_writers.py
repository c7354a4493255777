"""The store under concurrent writers (issue 51): GRPO-like groups written the way rollouts write
them, on any backend, with and without injected write failures and take-backs.

Each trajectory is a real ``Trajectory`` finished by ``Trajectory.finish`` (a ``WriteLedger`` per
writer, one ``ImageWriter``, one reference per screen held by the sequence key). ``WRITERS``
threads write; a group's ``GROUP`` trajectories are handed to them together and share their
first screen (one of ``TASK_SCREENS`` screens, so later groups share images earlier groups still
hold or are letting go); each later screen changes a few tiles of it. ``READERS`` threads play the
trainer: each finished trajectory is read once (its sequence and ``read_images`` of every screen,
checked pixel for pixel) and then deleted as the driver deletes a trained group
(``mm.delete_sequences``).

Faults, per setting: a share of byte writes fail (after their bytes landed) and each byte write
may be delayed; a share of trajectories is taken back by their host mid-finish (the ledger's
``take_back`` from the writer's own thread at a random store call, the write in flight going on),
and a share dies mid-finish: its thread stops at a random store action (local and TransferQueue:
between a write's bytes and its commit), the store's ``take_back`` of its writer name runs, and
every later store action of that thread fails, as for a process that died. Failures go into the
writer's own path: local and TransferQueue in the client's byte write, Ray in the shard, through
a chunk that fails (or waits) when the shard stores it.

Figures (``Figures``): keys left after every trajectory is read and deleted (``stats().keys``:
records in any state, and TransferQueue keys left in its partition), ``ShardLostError`` raised
(no shard dies here: every one is false), live images unreadable, and any other error a writer,
reader or clean-up met that its setting does not explain. Run long outside CI with
``python -m tests.unit.store.concurrent_writers --backend local --trajectories 100000``.
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from vlrl.mm import PatchRule, delete_sequences
from vlrl.mm.image_rows import read_images
from vlrl.rollout.client import ContextImage
from vlrl.rollout.trajectory import Sequence, Trajectory
from vlrl.store import ShardLostError, WriteLedger

GROUP, WRITERS, READERS = 8, 8, 2
LATENCY_S = {"local": 0.0003}
"""An in-process store answers in microseconds; each of its index calls and byte writes is given up
to this long (uniform), as a sharded index's round trip takes, so that writers of one screen
overlap as they do there."""
SWITCH_S = {"local": 1e-5}
"""Python's thread switch interval during a run on an in-process store (5 ms by default): threads
are cut at many more points, between a write's reservation and its commit among them (the
distributed stores' calls wait on other processes, which interleaves their writers)."""
TASK_SCREENS = 12
TURNS = 3
HEIGHT, WIDTH, TILE = 96, 192, 64  # 2 x 3 tiles
TOKENS = 24
RULE = PatchRule()


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    fail: float = 0.0
    """Share of byte writes that fail."""
    delay_s: float = 0.0
    """Each byte write waits this long (uniform 0 to it) between its reservation and its commit."""
    taken_back: float = 0.0
    """Share of trajectories their host takes back mid-finish."""
    died: float = 0.0
    """Share of trajectories whose writer dies mid-finish (the store's ``take_back`` of it)."""


SETTINGS = {
    s.name: s
    for s in (
        Setting("clean"),
        Setting("take-backs", taken_back=0.03, died=0.03),
        Setting("3% failed writes", fail=0.03, taken_back=0.03, died=0.03),
        Setting("3% failed writes, 1 ms delay", fail=0.03, delay_s=0.001, taken_back=0.03, died=0.03),
    )
}


@dataclass(slots=True)
class Figures:
    setting: str
    backend: str
    trajectories: int = 0
    finished: int = 0
    failed_injected: int = 0
    taken_back: int = 0
    died: int = 0
    keys_left: int = -1
    bytes_left: int = -1
    transferqueue_keys_left: int | None = None
    false_shard_lost: int = 0
    unreadable_live_images: int = 0
    unexplained: int = 0
    examples: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def note(self, kind: str, error: BaseException) -> None:
        if len(self.examples) < 5:
            self.examples.append(f"{kind}: {type(error).__name__}: {error}"[:400])


class InjectedFailure(OSError):
    """A byte write that failed on purpose."""


class Dead(BaseException):
    """A store action of a writer whose process died: nothing of it reaches the store."""


class FailingChunk(np.ndarray):
    """A chunk the Ray store's shard fails to store (its size is asked first), and so aborts."""

    @property
    def nbytes(self) -> int:
        raise InjectedFailure("injected: storing this chunk failed in the shard")


class SlowChunk(np.ndarray):
    """A chunk the Ray store's shard takes ``_delay_s`` to store (asked for its size first)."""

    _delay_s = 0.0

    @property
    def nbytes(self) -> int:
        time.sleep(type(self)._delay_s)
        return int(np.asarray(self).nbytes)


class _Plan(threading.local):
    """What the current writer thread's trajectory is to suffer."""

    writer: str | None = None
    ledger: WriteLedger | None = None
    take_back_at: int = -1
    took_back: bool = False
    die_at: int = -1
    actions: int = 0
    dead: bool = False
    reaped: threading.Event | None = None


def screens(task: int, variant: int) -> list[np.ndarray]:
    """A trajectory's screens: task ``task``'s first screen, then a few tiles changed per turn."""
    rng = np.random.default_rng(task)
    first = np.repeat(np.repeat(rng.integers(0, 256, (HEIGHT // 8, WIDTH // 8, 3), dtype=np.uint8), 8, 0), 8, 1)
    out = [first]
    for turn in range(1, TURNS):
        shot = out[-1].copy()
        r = np.random.default_rng([task, variant, turn])
        row, col = int(r.integers(0, HEIGHT // TILE)), int(r.integers(0, WIDTH // TILE))
        shot[row * TILE : row * TILE + 8, col * TILE : col * TILE + 24] = r.integers(0, 256, 3, dtype=np.uint8)
        out.append(np.ascontiguousarray(shot))
    return out


def trajectory(key: str, shots: list[np.ndarray]) -> Trajectory:
    """One sequence naming every screen, its tokens made up around the image slots."""
    traj = Trajectory(key)
    per_turn = TOKENS // len(shots)
    traj.sequences.append(
        Sequence(
            token_ids=list(range(TOKENS)),
            logprobs=[-0.5] * TOKENS,
            loss_mask=[i % per_turn >= per_turn // 2 for i in range(TOKENS)],
            images=[ContextImage.of(s) for s in shots],
            image_offsets=[i * per_turn for i in range(len(shots))],
            context_lengths=[(i + 1) * per_turn for i in range(len(shots))],
            policy_versions=[0] * len(shots),
            generated=[per_turn - per_turn // 2] * len(shots),
            states=[""] * len(shots),
        )
    )
    return traj


class Stress:
    """One setting's run on one store (``backend`` names it in the figures)."""

    def __init__(
        self, store: Any, backend: str, setting: Setting, *, seed: int = 0, latency_s: float | None = None
    ) -> None:
        self.store, self.setting = store, setting
        self._latency_s = LATENCY_S.get(backend, 0.0) if latency_s is None else latency_s
        self._switch_s = SWITCH_S.get(backend)
        self.figures = Figures(setting.name, backend)
        self._plan = _Plan()
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._reap: queue.Queue = queue.Queue()
        self._finished: queue.Queue = queue.Queue()
        self._instrument()

    # -- faults, in the store's own paths -------------------------------------------------------

    def _instrument(self) -> None:
        store, plan = self.store, self._plan
        real_index = store._index

        def index(method: str, *args: Any, **kwargs: Any) -> Any:
            self._act(before_bytes=False)
            self._wait(self._latency_s)
            return real_index(method, *args, **kwargs)

        store._index = index
        self._instrumented = [(store, "_index")]
        if "_write_fields" in vars(type(store)):  # local, TransferQueue: the client writes the bytes
            real_write = store._write_fields

            def write(key: str, arrays: Any, specs: Any, *handle: Any) -> Any:
                self._act(before_bytes=True)
                self._wait(self._latency_s + self.setting.delay_s)
                handles = real_write(key, arrays, specs, *handle)
                if plan.writer is not None and self._fails():
                    raise InjectedFailure(f"injected: the byte write of {key!r} failed")
                if plan.actions == plan.die_at:  # died after sending the bytes, before the commit
                    self._die()
                return handles

            store._write_fields = write
            self._instrumented.append((store, "_write_fields"))
        else:  # Ray: the shard writes them; a chunk fails or waits there
            shards = store._shards
            real_shard_write = shards.write

            def shard_write(key: str, specs: Any, chunks: dict, new_key: bool, refs: Any) -> Any:
                self._act(before_bytes=False)
                name = next(iter(chunks))
                parts = list(chunks[name])
                if plan.writer is not None and self._fails():
                    parts[0] = parts[0].view(FailingChunk)
                elif self.setting.delay_s:
                    SlowChunk._delay_s = self.setting.delay_s
                    parts[0] = parts[0].view(SlowChunk)
                return real_shard_write(key, specs, {**chunks, name: parts}, new_key, refs)

            shards.write = shard_write
            self._instrumented.append((shards, "write"))

    def _fails(self) -> bool:
        with self._lock:
            return self._rng.random() < self.setting.fail

    def _wait(self, most_s: float) -> None:
        if most_s:
            with self._lock:
                pause = self._rng.random() * most_s
            time.sleep(pause)

    def _act(self, *, before_bytes: bool) -> None:
        """One store action of the current thread: a dead writer's fails; the planned take-back
        or death happens here."""
        plan = self._plan
        if plan.writer is None:
            return  # a reader, or the reaper
        if plan.dead:
            raise Dead(f"{plan.writer} died")
        plan.actions += 1
        if plan.actions == plan.take_back_at and plan.ledger is not None:
            ledger, plan.ledger, plan.took_back = plan.ledger, None, True
            writer, plan.writer = plan.writer, None  # its own store calls, as the host's
            try:
                ledger.take_back()
            finally:
                plan.writer = writer
        if plan.actions == plan.die_at and not before_bytes:
            self._die()

    def _die(self) -> None:
        plan = self._plan
        plan.reaped = threading.Event()
        self._reap.put((plan.writer, plan.reaped))
        assert plan.reaped.wait(60), "the reaper did not take back a dead writer"
        plan.dead = True
        raise Dead(f"{plan.writer} died")

    def _reaper(self) -> None:
        while (item := self._reap.get()) is not None:
            writer, reaped = item
            try:
                self.store.take_back([writer])
            except BaseException as error:  # noqa: BLE001 - counted
                self._count_error("take_back", error)
            reaped.set()

    # -- writers and readers ----------------------------------------------------------------------

    def _write_one(self, task: int, group: str, index: int) -> None:
        plan, setting, figures = self._plan, self.setting, self.figures
        writer = f"run/{group}/{index}/{uuid.uuid4().hex[:6]}"
        key = f"seq/{group}/{index}"
        shots = screens(task, index)
        ledger = WriteLedger(f"trajectory {key}", writer=writer)
        with self._lock:
            draw = self._rng.random()
            at = self._rng.randint(1, 12)
        plan.writer, plan.ledger, plan.actions, plan.dead, plan.took_back = writer, ledger, 0, False, False
        plan.take_back_at = at if draw < setting.taken_back else -1
        plan.die_at = at if setting.taken_back <= draw < setting.taken_back + setting.died else -1
        try:
            metas = trajectory(key, shots).finish(
                self.store, key=key, group_id=group, source="stress", sample_index=index, reward=0.0,
                success=False, finish="done", patch_rule=RULE, ledger=ledger,
            )  # fmt: skip
        except BaseException as error:  # noqa: BLE001 - every outcome is counted
            self._count_failure(error, died=plan.dead, taken_back=plan.took_back)
            return
        finally:
            plan.writer, plan.ledger = None, None
        if plan.took_back:  # its host gave up on it: nobody reads it
            with self._lock:
                figures.taken_back += 1
            return
        self._finished.put((metas, shots))

    def _count_failure(self, error: BaseException, *, died: bool, taken_back: bool) -> None:
        figures = self.figures
        with self._lock:
            if died:
                figures.died += 1
            elif isinstance(error, ShardLostError):
                figures.false_shard_lost += 1
                figures.note("writer", error)
            elif taken_back:  # whatever it met after its host took it back (WritesTakenBackError, keys gone)
                figures.taken_back += 1
            elif isinstance(error, InjectedFailure) or "injected" in str(error):
                figures.failed_injected += 1
            else:
                figures.unexplained += 1
                figures.note("writer", error)

    def _count_error(self, where: str, error: BaseException) -> None:
        with self._lock:
            if isinstance(error, ShardLostError):
                self.figures.false_shard_lost += 1
            else:
                self.figures.unexplained += 1
            self.figures.note(where, error)

    def _reader(self) -> None:
        while (item := self._finished.get()) is not None:
            metas, shots = item
            try:
                self.store.get([m.key for m in metas])
                keys = [image.store_key for m in metas for image in m.images]
                back = read_images(self.store, keys)
                if any(back[k].tobytes() != s.tobytes() for k, s in zip(keys, shots)):
                    raise AssertionError("an image read back differs from the screen written")
                with self._lock:
                    self.figures.finished += 1
            except BaseException as error:  # noqa: BLE001 - counted
                with self._lock:
                    self.figures.unreadable_live_images += 1
                    self.figures.note("reader", error)
            try:
                delete_sequences(self.store, metas)
            except BaseException as error:  # noqa: BLE001 - counted
                self._count_error("clean-up", error)

    def run(self, trajectories: int) -> Figures:
        switch = sys.getswitchinterval()
        sys.setswitchinterval(self._switch_s or switch)
        try:
            return self._run(trajectories)
        finally:
            sys.setswitchinterval(switch)
            for owner, name in self._instrumented:  # the store's own methods again
                delattr(owner, name)

    def _run(self, trajectories: int) -> Figures:
        started = time.perf_counter()
        groups = -(-trajectories // GROUP)
        work: queue.Queue = queue.Queue()

        def writer() -> None:
            while (item := work.get()) is not None:
                self._write_one(*item)

        threads = [threading.Thread(target=writer, daemon=True) for _ in range(WRITERS)]
        readers = [threading.Thread(target=self._reader, daemon=True) for _ in range(READERS)]
        reaper = threading.Thread(target=self._reaper, daemon=True)
        for t in [*threads, *readers, reaper]:
            t.start()
        tag = uuid.uuid4().hex[:6]
        for g in range(groups):
            while work.qsize() > 2 * GROUP:  # a group's trajectories are taken together
                time.sleep(0.001)
            for i in range(GROUP):
                work.put((g % TASK_SCREENS, f"{tag}-{g}", i))
        for _ in threads:
            work.put(None)
        for t in threads:
            t.join()
        for _ in readers:
            self._finished.put(None)
        for t in readers:
            t.join()
        self._reap.put(None)
        reaper.join()
        self.figures.trajectories = groups * GROUP
        stats = self.store.stats()
        self.figures.keys_left, self.figures.bytes_left = stats.keys, stats.bytes
        if hasattr(self.store, "_config") and hasattr(self.store._config, "partition"):  # TransferQueue
            client = self.store._client()
            partition = self.store._config.partition
            self.figures.transferqueue_keys_left = len(client.kv_list(partition_id=partition).get(partition, {}))
        self.figures.seconds = round(time.perf_counter() - started, 1)
        return self.figures


def _store(backend: str) -> Any:
    if backend == "local":
        from vlrl.store import LocalStore

        return LocalStore(image_tile_px=TILE)
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    name = f"stress-{uuid.uuid4().hex[:8]}"
    if backend == "ray":
        from vlrl.store.ray_store import RayStore

        return RayStore.Config(namespace=name, image_tile_px=TILE).build()
    from vlrl.store.transferqueue_store import TransferQueueStore

    return TransferQueueStore.Config(partition=name, image_tile_px=TILE).build()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["local", "ray", "transferqueue"], default="local")
    parser.add_argument("--trajectories", type=int, default=3000, help="per setting")
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name in args.settings:
        store = _store(args.backend)
        figures = Stress(store, args.backend, SETTINGS[name], seed=args.seed).run(args.trajectories)
        print(json.dumps(asdict(figures)), flush=True)
        if hasattr(store, "destroy"):
            store.destroy()


if __name__ == "__main__":
    main()
