"""``vlrl bench delta``: bytes a multi-turn GUI agent ships to its inference endpoint.

A trajectory of T turns adds one 1280x720 screenshot per turn (distinct desktop screens from
the desktop harness). Schemes, each through the real ``InferenceClient``:

- (a) ``full``: every request carries every image of the context (what agent loops do today);
- (b) ``window5``: every request carries the last 5 images;
- (c) ``delta``: pixels once per trajectory, references afterwards (vlrl);

against the lower bound, every image's bytes sent once. Bytes are raw RGB as the embedded engine
receives them (a PNG transport scales every scheme alike). Then the rollout wall time of the
same trajectories under (a) and (c) against the embedded engine serving a tiny Qwen2-VL, where
the engine's own byte counter is checked against the client's.

``http`` (``delta_http``): the same comparison where the bytes cross a wire, through ``vlrl serve``
in its own process: request-body and image bytes counted by the server, and the wall time of one
conversation per scheme, repeated with the order rotated (min / median / max). The client-side
figures above are the accounting; the HTTP ones are the measurement.

``vllm`` (``delta_vllm``): the anchor, the same conversations through vLLM's own OpenAI server
(``vllm serve``, started from the vLLM environment's Python) at 5, 15 and 50 turns: request-body
bytes counted by vLLM's HTTP instrumentation and wall times, full resend vs delta with uuids;
``skipped: <reason>`` where no vLLM Python is found. The headline keys
``vllm_wire_full_over_delta_T15/T50`` and ``vllm_speedup_T15/T50`` lead ``--json``.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from typing import Any

import numpy as np

from vlrl.bench.spread import spread
from vlrl.mm import content_hash
from vlrl.rollout.chat import ChatTurn
from vlrl.rollout.client import ContextImage, InferenceClient
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, SamplingParams

TURNS = {"smoke": (5, 15, 50), "small": (5, 15, 50), "full": (5, 15, 50, 100)}
ROLLOUT = {
    "smoke": {"turns": 6, "trajectories": 2, "reps": 2},
    "small": {"turns": 15, "trajectories": 4, "reps": 5},
    "full": {"turns": 30, "trajectories": 8, "reps": 5},
}
SCREEN = (1280, 720)


def screenshots(n: int) -> list[ContextImage]:
    """Distinct realistic desktop screens: the desktop harness at 1280x720, one seed per turn."""
    from harnesses.desktop import DesktopHarness

    harness = DesktopHarness(width=SCREEN[0], height=SCREEN[1])
    try:
        shots = [harness.reset(seed=seed)[0].screenshot for seed in range(n)]
    finally:
        harness.close()
    return [ContextImage(content_hash(pixels), pixels) for pixels in shots]


class Receiver:
    """An endpoint that holds every image it is sent and answers at once: it isolates what the
    client ships from any model cost."""

    name = "receiver"

    def __init__(self) -> None:
        self.held: set[str] = set()
        self.bytes_received = 0

    async def generate(self, request: GenerateRequest) -> GenerateResult | CacheMiss:
        self.bytes_received += request.image_bytes
        self.held.update(p.content_hash for p in request.images if p.pixels is not None)
        missing = tuple(p.content_hash for p in request.images if p.content_hash not in self.held)
        if missing:
            return CacheMiss(request.request_id, missing)
        return GenerateResult(request.request_id, np.zeros(1, np.int32), np.zeros(1, np.float32), "stop", 0, 1, 0)

    async def load(self) -> int:
        return 0

    async def forget(self, trajectory_id: str) -> None:
        return None


async def _ship(images: list[ContextImage], scheme: str) -> int:
    receiver = Receiver()
    client = InferenceClient([receiver], InferenceClient.Config(image_shipping="delta" if scheme == "delta" else "full"))
    for turn in range(1, len(images) + 1):
        context = images[:turn] if scheme != "window5" else images[max(0, turn - 5) : turn]
        await client.generate("t", np.zeros(4, np.int32), context, SamplingParams(), request_id=f"t{turn}")
    assert receiver.bytes_received == client.stats.image_bytes_sent
    return receiver.bytes_received


def measure_bytes(turns: tuple[int, ...], images: list[ContextImage]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in turns:
        shots = images[:t]
        figures = {scheme: asyncio.run(_ship(shots, scheme)) for scheme in ("full", "window5", "delta")}
        bound = sum(s.pixels.nbytes for s in shots)
        out[f"T{t}"] = {
            "bytes_full": figures["full"],
            "bytes_window5": figures["window5"],
            "bytes_delta": figures["delta"],
            "bytes_lower_bound": bound,
            "delta_over_bound": figures["delta"] / bound,
            "full_over_delta": figures["full"] / figures["delta"],
        }
    return out


def measure_rollout(turns: int, trajectories: int, images: list[ContextImage], reps: int) -> dict[str, Any]:
    """Wall time of the same multi-turn rollouts against the embedded engine, full vs delta:
    ``reps`` rounds, the schemes' order alternating, each run on a fresh engine (started outside
    the timer, so no run finds another's images cached)."""
    import ray
    from transformers import AutoProcessor

    from vlrl.mm import patch_rule_of
    from vlrl.models import build_tiny
    from vlrl.rollout.chat import ChatFormat
    from vlrl.rollout.engine import EmbeddedEngine
    from vlrl.rollout.ray_endpoint import RayEndpoint

    schemes = ("full", "delta")
    walls: dict[str, list[float]] = {scheme: [] for scheme in schemes}
    received: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = build_tiny("qwen2_vl", folder)
        processor = AutoProcessor.from_pretrained(path)
        chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")
        for rep in range(reps):
            for scheme in schemes if rep % 2 == 0 else schemes[::-1]:
                engine = EmbeddedEngine.Config(cpus=0).build(model_path=str(path))
                ray.get(engine.stats.remote())  # started and answering before the timer
                client = InferenceClient([RayEndpoint(engine, "engine")], InferenceClient.Config(image_shipping=scheme))
                started = time.perf_counter()
                asyncio.run(_rollouts(client, chat, images[:turns], trajectories))
                walls[scheme].append(time.perf_counter() - started)
                received[scheme] = ray.get(engine.stats.remote())["image_bytes_received"]
                assert received[scheme] == client.stats.image_bytes_sent, (received, client.stats.image_bytes_sent)
                ray.kill(engine)
    return {
        "turns": turns,
        "trajectories": trajectories,
        **{scheme: {"wall_s": spread(walls[scheme]), "image_bytes": received[scheme]} for scheme in schemes},
        "rollout_speedup": statistics.median(walls["full"]) / statistics.median(walls["delta"]),
    }


async def _rollouts(client: InferenceClient, chat: Any, images: list[ContextImage], n: int) -> None:
    sampling = SamplingParams(temperature=0.0, max_tokens=4, stop_token_ids=chat.stop_token_ids)

    async def one(index: int) -> None:
        turns: list[ChatTurn] = []
        for turn, image in enumerate(images):
            turns.append(ChatTurn("Open the settings." if turn == 0 else "", (image.width, image.height)))
            ids = chat.context(turns).ids
            result = await client.generate(
                f"t{index}", np.asarray(ids, np.int32), images[: turn + 1], sampling, request_id=f"{index}-{turn}"
            )
            turns[-1].answer = [int(t) for t in result.token_ids]
            turns[-1].answer_stopped = result.finish_reason == "stop"

    await asyncio.gather(*(one(i) for i in range(n)))


def run(size: str) -> dict[str, Any]:
    import ray

    turns = TURNS[size]
    images = screenshots(max(max(turns), ROLLOUT[size]["turns"]))
    figures = measure_bytes(turns, images)
    started_ray = not ray.is_initialized()
    if started_ray:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=2 * 1024**3, log_to_driver=False)
    try:
        rollout = measure_rollout(ROLLOUT[size]["turns"], ROLLOUT[size]["trajectories"], images, ROLLOUT[size]["reps"])
    finally:
        if started_ray:
            ray.shutdown()
    from vlrl.bench.delta_http import measure_http
    from vlrl.bench.delta_vllm import headline as vllm_headline
    from vlrl.bench.delta_vllm import measure_vllm

    http = measure_http(size)
    vllm = measure_vllm(size)
    headline, *others = http
    return {
        **vllm_headline(vllm),
        "vllm": vllm,
        "http": {"screen": headline, **http[headline]},
        **{f"http_{screen}": http[screen] for screen in others},
        "screen": f"{SCREEN[0]}x{SCREEN[1]}",
        "image_bytes": images[0].pixels.nbytes,
        "per_turns": figures,
        "rollout": rollout,
        "delta_over_bound": max(f["delta_over_bound"] for f in figures.values()),
        "full_over_delta_T15": figures["T15"]["full_over_delta"],
        "full_over_delta_T50": figures["T50"]["full_over_delta"],
        "rollout_speedup": rollout["rollout_speedup"],
    }
