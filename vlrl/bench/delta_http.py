"""``vlrl bench delta``'s HTTP half: one conversation through ``vlrl serve``, full resend vs delta.

A conversation of T turns adds one desktop-harness screenshot per turn (distinct screens, at a
real screen size) and asks the served tiny Qwen2-VL for a short answer each turn, token-in, through
``OpenAIEndpoint`` and ``InferenceClient``. Under ``full`` every request carries every screenshot
of the history as a PNG data URL (what agent loops that resend the message list pay every turn:
encoding, transfer and decoding of every image); under ``delta`` a screenshot goes once and later
requests name it by uuid. Bytes are counted where they cross: the server's own counters of
request-body bytes (``vlrl:request_bytes_received``) and of encoded image bytes
(``vlrl:image_bytes_received``), read from its ``/metrics`` before and after the conversation.
The once-only bound is every screenshot's PNG sent once. Wall times are repeated with the order
of the two schemes rotated, the server warmed up beforehand, and reported as min / median / max.

The server runs as its own process (``vlrl serve``), as a user runs it. Its engine keeps processed
images by content hash, so a full resend pays the processor once per distinct image, as delta
does: the difference measured is encoding, transfer and decoding.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from typing import Any

import aiohttp
import numpy as np

from vlrl.bench.spread import spread
from vlrl.mm import encode_image

SCHEMES = ("full", "delta")
SETTINGS = {
    "smoke": {"screens": ((1280, 720),), "turns": (1, 15, 50), "timed": (15, 50), "runs": 2},
    "small": {"screens": ((1280, 720),), "turns": (1, 5, 15, 50), "timed": (15, 50), "runs": 5},
    "full": {"screens": ((1280, 720), (1920, 1080)), "turns": (1, 5, 15, 50, 100), "timed": (15, 50), "runs": 5},
}
IMAGE_SIDE = 112
"""The tiny model sees every screenshot at about 112x112 pixels (16 image tokens), so that 100 of them fit its
4096 positions; the bytes on the wire do not depend on it."""


def screenshots(n: int, size: tuple[int, int]) -> list[np.ndarray]:
    from harnesses.desktop import DesktopHarness

    harness = DesktopHarness(width=size[0], height=size[1])
    try:
        return [harness.reset(seed=seed)[0].screenshot for seed in range(n)]
    finally:
        harness.close()


@contextmanager
def served(model_path: str):
    """``vlrl serve`` on a free port in a child process; yields its URL."""
    command = [sys.executable, "-m", "vlrl.cli", "serve", "--model", model_path, "--port", "0",
               "--max-request-mb", "1024", "--max-request-pixels", str(2**31 - 1)]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in server.stdout:
            found = re.search(r" at (http://\S+)/v1", line)
            if found:
                yield found.group(1)
                break
        else:
            raise RuntimeError(f"vlrl serve exited with {server.wait()} before listening")
    finally:
        server.terminate()
        server.wait(timeout=30)


async def converse(client: Any, chat: Any, shots: list[np.ndarray], tag: str) -> float:
    """One conversation through ``client``: a turn per screenshot, each prompt the whole chat so
    far (greedy answers of 4 tokens), the client shipping images by its own scheme; returns the
    wall time."""
    from vlrl.mm import content_hash
    from vlrl.rollout.chat import ChatTurn
    from vlrl.rollout.client import ContextImage
    from vlrl.rollout.protocol import SamplingParams

    sampling = SamplingParams(temperature=0.0, max_tokens=4, stop_token_ids=chat.stop_token_ids)
    started = time.perf_counter()
    images: list[ContextImage] = []
    turns: list[ChatTurn] = []
    for turn, pixels in enumerate(shots):  # the client hashes each screenshot once, as the agent loop does
        images.append(ContextImage(content_hash(pixels), pixels))
        turns.append(ChatTurn("Open the settings." if turn == 0 else "", (pixels.shape[1], pixels.shape[0])))
        ids = np.asarray(chat.context(turns).ids, np.int32)
        result = await client.generate(tag, ids, list(images), sampling, request_id=f"{tag}-{turn}")
        turns[-1].answer = [int(t) for t in result.token_ids]
        turns[-1].answer_stopped = result.finish_reason == "stop"
    return time.perf_counter() - started


async def _conversation(url: str, chat: Any, shots: list[np.ndarray], scheme: str, tag: str) -> dict[str, float]:
    from vlrl.rollout.client import InferenceClient
    from vlrl.rollout.http_endpoint import OpenAIEndpoint, parse_metrics

    endpoint = OpenAIEndpoint.Config(base_url=url).build()
    client = InferenceClient([endpoint], InferenceClient.Config(image_shipping=scheme))

    async def counters() -> dict[str, float]:
        async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
            metrics = parse_metrics(await response.text())
        return {k: metrics[f"vlrl:{k}"] for k in ("request_bytes_received", "image_bytes_received", "images_decoded")}

    before = await counters()
    wall = await converse(client, chat, shots, tag)
    after = await counters()
    await endpoint.close()
    return {"wall_s": wall, **{k: after[k] - before[k] for k in before}}


def measure_http(size: str = "small", *, turns=None, timed=None, runs=None, screens=None) -> dict[str, Any]:
    """The HTTP figures per screen size: per T, wire and image bytes of both schemes and the
    once-only bound; at the timed T, wall times over ``runs`` rotated repetitions."""
    from transformers import AutoProcessor

    from vlrl.mm import patch_rule_of
    from vlrl.models import build_tiny
    from vlrl.rollout.chat import ChatFormat

    settings = SETTINGS[size]
    turns, timed = turns or settings["turns"], timed or settings["timed"]
    runs, screens = runs or settings["runs"], screens or settings["screens"]
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        path = str(build_tiny("qwen2_vl", folder, min_pixels=IMAGE_SIDE**2, max_pixels=IMAGE_SIDE**2))
        processor = AutoProcessor.from_pretrained(path)
        chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")
        with served(path) as url:
            for screen in screens:
                shots = screenshots(max(turns), screen)
                png_bytes = [len(encode_image(s)) for s in shots]
                asyncio.run(_conversation(url, chat, shots[:2], "delta", "warm-up"))
                figures: dict[str, Any] = {}
                for t in sorted(set(turns) | set(timed)):
                    reps = runs if t in timed else 1
                    measured: dict[str, list[dict]] = {s: [] for s in SCHEMES}
                    for rep in range(reps):
                        order = SCHEMES if rep % 2 == 0 else SCHEMES[::-1]
                        for scheme in order:
                            tag = f"{screen[0]}-T{t}-{scheme}-{rep}"
                            measured[scheme].append(asyncio.run(_conversation(url, chat, shots[:t], scheme, tag)))
                    figures[f"T{t}"] = _figures(measured, png_bytes[:t], timed=t in timed)
                out[f"{screen[0]}x{screen[1]}"] = figures
    return out


def _figures(measured: dict[str, list[dict]], png_bytes: list[int], *, timed: bool) -> dict[str, Any]:
    first = {scheme: runs[0] for scheme, runs in measured.items()}
    for scheme, runs in measured.items():  # the bytes of one conversation do not vary between runs
        assert all(r["request_bytes_received"] == runs[0]["request_bytes_received"] for r in runs), scheme
    out: dict[str, Any] = {
        "wire_bytes_full": int(first["full"]["request_bytes_received"]),
        "wire_bytes_delta": int(first["delta"]["request_bytes_received"]),
        "image_bytes_full": int(first["full"]["image_bytes_received"]),
        "image_bytes_delta": int(first["delta"]["image_bytes_received"]),
        "image_bytes_once": sum(png_bytes),
        "images_decoded_full": int(first["full"]["images_decoded"]),
        "images_decoded_delta": int(first["delta"]["images_decoded"]),
    }
    out["wire_full_over_delta"] = out["wire_bytes_full"] / out["wire_bytes_delta"]
    if timed:
        walls = {scheme: [r["wall_s"] for r in runs] for scheme, runs in measured.items()}
        out |= {f"wall_s_{scheme}": spread(values) for scheme, values in walls.items()}
        out["rollout_speedup"] = statistics.median(walls["full"]) / statistics.median(walls["delta"])
    return out

