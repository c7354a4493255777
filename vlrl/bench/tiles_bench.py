"""``vlrl bench tiles``: what screenshots cost in the store as tiles, on real harness trajectories.

Each run plays one trajectory on a real harness: the browser harness (headless Chromium, the
form-fill app, its oracle's clicks with the typing one character per turn) and the desktop
harness (the fill-form family, one typed character per turn). Its distinct screenshots are written
to a ``RayStore`` as tiles (``mm.image_rows``, the default) and, side by side, as raw pixels, and
measured:

- ``stored_over_raw`` / ``stored_over_png``: bytes the tiled store holds (its index's count of
  the payload arrays it keeps) over raw RGB, and over one PNG per distinct image (Pillow's
  default encoder, what a user would store instead);
- ``exact``: every image read back equals the original, bit for bit;
- ``fetch_s_per_image``: ``read_images`` of one image from the store's shards into this process
  (index lookup, the manifest and pack objects, decompression and reassembly), next to
  ``png_decode_s_per_image`` (Pillow decoding that image's PNG, already in memory) and
  ``raw_fetch_s_per_image`` (the same image stored as raw pixels); each ``{min, median, max}``
  over the trajectory's images;
- ``written_bytes_per_turn``: what each turn's new screenshot sent to the store, tiled and raw.

At the top level, per harness: ``stored_over_png`` and ``fetch_over_png_decode`` (median fetch over
median PNG decode).

- ``shipped_bytes_per_turn``: what each turn's new screenshot costs between processes, serialised
  as Ray serialises it (pickle protocol 5, out-of-band buffers counted), from turn 2 on. ``env_to_loop``:
  the env host's reply to a step (``pool.screens``: the tiles the loop lacks) next to the same
  reply with the whole screenshot; ``loop_to_engine``: the image parts of the turn's request to
  a replica (``rollout.client.image_parts``: the tiles the replica lacks) next to whole-image
  delta shipping (each new image's pixels once, references for the rest). ``ship_s_per_turn``:
  the sender's encoding plus the receiver's assembly, next to pickling and unpickling the whole
  screenshot.
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlrl.bench.spread import spread

SIZES = {
    "smoke": {"browser": (640, 480, 4), "desktop": (640, 480, 6)},
    "small": {"browser": (640, 480, 8), "desktop": (640, 480, 12)},
    "full": {"browser": (1280, 720, 15), "desktop": (1920, 1080, 50)},
}
"""(width, height, turns) of each run."""
TYPED = "ada lovelace ada@example.com the analytical engine weaves algebraic patterns"


def run(size: str = "small") -> dict[str, Any]:
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, log_to_driver=False, object_store_memory=512 * 1024**2)
    try:
        runs = []
        for harness, (width, height, turns) in SIZES[size].items():
            if harness == "browser" and not _has_chromium():
                runs.append({"harness": harness, "skipped": "no Chromium at /usr/bin/chromium"})
                continue
            shots = (_browser_screens if harness == "browser" else desktop_screens)(width, height, turns)
            runs.append({"harness": harness, "width": width, "height": height, "turns": len(shots), **measure(shots)})
    finally:
        if started:
            ray.shutdown()
    measured = [r for r in runs if "skipped" not in r]
    return {
        "runs": runs,
        "stored_over_png": {r["harness"]: r["stored_over_png"] for r in measured},
        "shipped_over_whole": {
            r["harness"]: {
                hop: ship[hop]["tiles"]["median"] / ship[hop][whole]["median"]
                for hop, whole in (("env_to_loop", "whole"), ("loop_to_engine", "whole_delta"))
            }
            for r in measured
            for ship in [r["shipped_bytes_per_turn"]]
        },
        "fetch_over_png_decode": {
            r["harness"]: r["fetch_s_per_image"]["median"] / r["png_decode_s_per_image"]["median"] for r in measured
        },
    }


def _has_chromium() -> bool:
    return os.access("/usr/bin/chromium", os.X_OK)


def desktop_screens(width: int, height: int, turns: int) -> list[np.ndarray]:
    """A desktop trajectory: a form, its first field focused, then one typed character per turn."""
    from harnesses.desktop.harness import DesktopHarness
    from vlrl.harness import Action

    env = DesktopHarness(width=width, height=height, max_steps=1000, tasks=("fill-form",))
    obs, _ = env.reset(seed=0)
    shots = [obs.screenshot]
    obs, *_ = env.step(env.oracle())  # focus the first field
    shots.append(obs.screenshot)
    for char in TYPED:
        if len(shots) == turns:
            break
        obs, _, terminated, truncated, _ = env.step(Action.type(char))
        shots.append(obs.screenshot)
        if terminated or truncated:
            break
    return shots


def _browser_screens(width: int, height: int, turns: int) -> list[np.ndarray]:
    from harnesses.browser.harness import BrowserHarness
    from vlrl.harness import Action

    env = BrowserHarness(width=width, height=height, max_steps=1000, tasks=["form-fill"])
    try:
        obs, _ = env.reset(seed=0)
        shots = [obs.screenshot]
        while len(shots) < turns:
            action = env.oracle()
            steps = [Action.type(c) for c in action.text] if action.kind == "type" else [action]
            for step in steps:
                obs, _, terminated, truncated, _ = env.step(step)
                shots.append(obs.screenshot)
                if terminated or truncated or len(shots) == turns:
                    return shots
        return shots
    finally:
        env.close()


@dataclass
class _Written:
    store: Any
    keys: list[str]
    bytes_per_turn: list[int]


def measure(shots: list[np.ndarray]) -> dict[str, Any]:
    """The figures of one trajectory's screenshots (see the module docstring)."""
    from PIL import Image

    from vlrl.mm import describe_image

    distinct = {describe_image(s).content_hash: s for s in shots}
    pngs = {}
    for digest, shot in distinct.items():
        buffer = io.BytesIO()
        Image.fromarray(shot).save(buffer, format="PNG")
        pngs[digest] = buffer.getvalue()
    tiled, raw = _write(shots, tile_px=64), _write(shots, tile_px=None)
    try:
        stored = tiled.store.stats().bytes
        fetch, exact = _timed_reads(tiled, shots)
        raw_fetch, _ = _timed_reads(raw, shots)
        decode = []
        for data in pngs.values():
            start = time.perf_counter()
            np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            decode.append(time.perf_counter() - start)
    finally:
        tiled.store.destroy()
        raw.store.destroy()
    raw_bytes = sum(s.nbytes for s in distinct.values())
    png_bytes = sum(map(len, pngs.values()))
    return {
        "distinct_images": len(distinct),
        "raw_bytes": raw_bytes,
        "png_bytes": png_bytes,
        "stored_bytes": stored,
        "stored_over_raw": stored / raw_bytes,
        "stored_over_png": stored / png_bytes,
        "exact": exact,
        "fetch_s_per_image": spread(fetch),
        "raw_fetch_s_per_image": spread(raw_fetch),
        "png_decode_s_per_image": spread(decode),
        "written_bytes_per_turn": {"tiled": spread(tiled.bytes_per_turn[1:]), "raw": spread(raw.bytes_per_turn[1:])},
        **shipped(shots),
    }


def shipped(shots: list[np.ndarray]) -> dict[str, Any]:
    """``shipped_bytes_per_turn`` and ``ship_s_per_turn`` of one trajectory (module docstring)."""
    import pickle

    from vlrl.harness import Observation
    from vlrl.mm import DeltaTracker
    from vlrl.mm.tile_wire import TileReceiver, TileSender
    from vlrl.pool.screens import ShippedObservation, new_receiver
    from vlrl.rollout.client import ContextImage, image_parts

    def wire(message: Any) -> int:
        buffers: list[pickle.PickleBuffer] = []
        head = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
        return len(head) + sum(b.raw().nbytes for b in buffers)

    env_tiles, env_whole, engine_tiles, engine_whole, tiles_s, whole_s = [], [], [], [], [], []
    env_sender, env_receiver = TileSender(), new_receiver()
    engine_sender, engine_receiver = TileSender(), TileReceiver(256 * 2**20)
    tiled_tracker, whole_tracker = DeltaTracker(), DeltaTracker()
    context: list[ContextImage] = []
    for shot in shots:
        obs = Observation(screenshot=shot, goal="fill the form")
        start = time.perf_counter()
        message = ShippedObservation.of(obs, env_sender)
        assembled = pickle.loads(pickle.dumps(message, protocol=5)).observation(env_receiver)
        tiles_s.append(time.perf_counter() - start)
        if assembled is None or assembled.screenshot.tobytes() != shot.tobytes():
            raise RuntimeError("a screen shipped as tiles to the loop did not assemble exactly")
        start = time.perf_counter()
        pickle.loads(pickle.dumps(obs, protocol=5))
        whole_s.append(time.perf_counter() - start)
        env_tiles.append(wire(message))
        env_whole.append(wire(obs))
        context.append(ContextImage.of(shot))
        parts, whole_parts = image_parts(context, tiled_tracker, engine_sender), image_parts(context, whole_tracker)
        for part in parts:
            if part.tiles is not None and engine_receiver.assemble(part.tiles) is None:
                raise RuntimeError("a screen shipped as tiles to the engine did not assemble")
        engine_tiles.append(wire(parts))
        engine_whole.append(wire(whole_parts))
        tiled_tracker.shipped(p.content_hash for p in parts)
        whole_tracker.shipped(p.content_hash for p in whole_parts)
    return {
        "shipped_bytes_per_turn": {
            "env_to_loop": {"tiles": spread(env_tiles[1:]), "whole": spread(env_whole[1:])},
            "loop_to_engine": {"tiles": spread(engine_tiles[1:]), "whole_delta": spread(engine_whole[1:])},
        },
        "ship_s_per_turn": {"tiles": spread(tiles_s[1:]), "whole_pickle": spread(whole_s[1:])},
    }


def _write(shots: list[np.ndarray], *, tile_px: int | None) -> _Written:
    """The trajectory's screens written in turn order, each held by its turn's sequence."""
    from vlrl.mm import describe_image
    from vlrl.mm.image_rows import ImageWriter
    from vlrl.store.ray_store import RayStore

    store = RayStore.Config(image_tile_px=tile_px).build()
    images = ImageWriter(store)
    keys, per_turn = [], []
    for turn, shot in enumerate(shots):
        meta = describe_image(shot)
        before = store.io_stats().bytes_written
        images.put(store, meta, shot, holder=f"seq/t/{turn}")
        per_turn.append(store.io_stats().bytes_written - before)
        keys.append(meta.store_key)
    return _Written(store, keys, per_turn)


def _timed_reads(written: _Written, shots: list[np.ndarray]) -> tuple[list[float], bool]:
    """The time of reading each distinct image alone, and whether all came back exact. Each image
    is checked and dropped before the next read, as each PNG decode is: both reuse freed memory."""
    from vlrl.mm.image_rows import read_images

    times, exact = [], True
    for key, shot in dict(zip(written.keys, shots)).items():
        start = time.perf_counter()
        pixels = read_images(written.store, [key])[key]
        times.append(time.perf_counter() - start)
        exact &= pixels.tobytes() == shot.tobytes()
        del pixels
    return times, exact

