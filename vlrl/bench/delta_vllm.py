"""``vlrl bench delta``'s vLLM half: the same conversation through vLLM's own OpenAI server.

The anchor users run: ``vllm serve`` of the tiny Qwen2-VL (``--enable-scale-out``, its token-in
route ``/inference/v1/generate``), started as a child process from the vLLM environment's Python
(``VLRL_VLLM_PYTHON``, by default ``<repo>/.venv-vllm/bin/python``; ``bash scripts/setup_vllm.sh``
builds it), while the bench itself may run in the main environment. A conversation of T turns
adds one desktop-harness screenshot per turn and asks for a short answer each turn through
``OpenAIEndpoint`` (``api='vllm'``) and ``InferenceClient``, as ``delta_http`` does against
``vlrl serve``:

- ``full``: every request carries every screenshot of the history as a PNG data URL, each with
  its uuid (what an agent loop that resends its message list pays);
- ``delta``: a screenshot goes once; later requests name it by uuid with a null URL, and vLLM
  takes it from its multimodal cache.

Bytes are counted where they are paid: the server's own Prometheus counter of request-body bytes
(``http_request_size_bytes``, vLLM's HTTP instrumentation) read from its ``/metrics`` before and
after each conversation; the once-only bound is every screenshot's PNG sent once. Wall times are
repeated with the order of the two schemes rotated, the server warmed up beforehand, as
min / median / max. vLLM's prefix cache serves both schemes alike (the same token prompts), so
the difference measured is encoding, transfer, decoding and the multimodal cache's work.

When the vLLM Python is missing the rows say ``skipped: <reason>``; a server that is there and
fails to start is an error, with its log's tail.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from vlrl.bench.delta_http import IMAGE_SIDE, SCHEMES, converse, screenshots
from vlrl.bench.spread import spread
from vlrl.mm import encode_image

ROOT = Path(__file__).resolve().parents[2]
PYTHON_VARIABLE = "VLRL_VLLM_PYTHON"
SETTINGS = {
    "smoke": {"turns": (5, 15, 50), "runs": 2},
    "small": {"turns": (5, 15, 50), "runs": 5},
    "full": {"turns": (5, 15, 50, 100), "runs": 5},
}
SCREEN = (1280, 720)
MAX_MODEL_LEN = 4096
"""The tiny build's ``max_position_embeddings``: 100 turns of 16-token screenshots fit."""
ROUTE = "/inference/v1/generate"
REQUEST_BYTES = "http_request_size_bytes_sum"
REQUESTS = "http_request_size_bytes_count"
START_TIMEOUT_S = 900.0


def vllm_python() -> tuple[str | None, str]:
    """``(path, '')`` of the Python that runs ``vllm serve``, or ``(None, why not)``."""
    path = os.environ.get(PYTHON_VARIABLE) or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(path).exists():
        return None, (
            f"no vLLM Python at {path} (set {PYTHON_VARIABLE}, or build .venv-vllm with bash scripts/setup_vllm.sh)"
        )
    found = subprocess.run([path, "-c", "import vllm"], capture_output=True, text=True, timeout=300)
    if found.returncode != 0:
        last = (found.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"{path} cannot import vllm: {last}"
    return path, ""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def vllm_served(python: str, model_path: str, *, max_images: int):
    """``vllm serve`` of ``model_path`` (float32, eager, token-in route on) on a free port; yields its URL."""
    port = _free_port()
    command = [
        python, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path, "--port", str(port),
        "--dtype", "float32", "--enforce-eager", "--max-model-len", str(MAX_MODEL_LEN),
        "--limit-mm-per-prompt", json.dumps({"image": max_images, "video": 0}), "--enable-scale-out",
        "--logprobs-mode", "raw_logprobs", "--generation-config", "vllm",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                if server.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    state = f"exited with {server.returncode}" if server.poll() is not None else "did not answer"
                    raise RuntimeError(f"vllm serve {state} ({python}): {log.read()[-3000:]}")
                try:
                    with urllib.request.urlopen(f"{url}/v1/models", timeout=5) as answer:
                        if answer.status == 200:
                            break
                except OSError:
                    time.sleep(2)
            try:
                yield url
            except Exception as error:  # the server's side of a failed request is in its log
                log.seek(0)
                raise RuntimeError(f"{error}\nvllm serve's log ends: {log.read()[-4000:]}") from error
        finally:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


async def _counters(url: str) -> dict[str, float]:
    """vLLM's count of the token-in route's requests and of their body bytes (other routes left out:
    the endpoint's ``/v1/models`` look-up is counted under its own handler)."""
    from vlrl.rollout.http_endpoint import parse_metrics

    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        text = await response.text()
    lines = [line for line in text.splitlines() if f'handler="{ROUTE}"' in line]
    metrics = parse_metrics("\n".join(lines))
    return {"request_bytes": metrics.get(REQUEST_BYTES, 0.0), "requests": metrics.get(REQUESTS, 0.0)}


async def _conversation(
    url: str, chat: Any, pad: int, shots: list[np.ndarray], scheme: str, tag: str
) -> dict[str, float]:
    from vlrl.rollout.client import InferenceClient
    from vlrl.rollout.http_endpoint import OpenAIEndpoint

    endpoint = OpenAIEndpoint.Config(base_url=url, api="vllm").build(image_token_id=pad)
    client = InferenceClient([endpoint], InferenceClient.Config(image_shipping=scheme))
    before = await _counters(url)
    wall = await converse(client, chat, shots, tag)
    await endpoint.close()
    # vLLM's instrumentation records a request once its answer is sent: wait until all are counted.
    for _ in range(50):
        after = await _counters(url)
        if after["requests"] - before["requests"] >= client.stats.requests:
            break
        await asyncio.sleep(0.1)
    counted = int(after["requests"] - before["requests"])
    if counted != client.stats.requests:
        raise RuntimeError(f"vllm serve counted {counted} of the {client.stats.requests} requests sent ({tag})")
    return {
        "wall_s": wall,
        "request_bytes": int(after["request_bytes"] - before["request_bytes"]),
        "requests": counted,
        "images_referenced": client.stats.images_referenced,
        "cache_misses": client.stats.cache_misses,
    }


def measure_vllm(size: str = "small", *, turns=None, runs=None, screen=SCREEN) -> dict[str, Any]:
    """The vLLM-server figures: per T, request-body bytes of both schemes, the once-only PNG bound
    and the wall times over ``runs`` rotated repetitions; or ``{'skipped': why}``."""
    python, why = vllm_python()
    if python is None:
        return {"skipped": why}
    from transformers import AutoProcessor

    from vlrl.mm import patch_rule_of
    from vlrl.models import build_tiny
    from vlrl.rollout.chat import ChatFormat

    settings = SETTINGS[size]
    turns, runs = turns or settings["turns"], runs or settings["runs"]
    shots = screenshots(max(turns), screen)
    png_bytes = [len(encode_image(s)) for s in shots]
    out: dict[str, Any] = {"server": f"vllm serve ({python})", "screen": f"{screen[0]}x{screen[1]}"}
    with tempfile.TemporaryDirectory() as folder:
        # Heads of 32 dimensions (the smallest vLLM's CPU attention takes); every screenshot at 112x112 (16 tokens).
        side = IMAGE_SIDE**2
        path = str(build_tiny("qwen2_vl", folder, head_dim=32, rope_theta=10.0, min_pixels=side, max_pixels=side))
        processor = AutoProcessor.from_pretrained(path)
        chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")
        pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        started = time.perf_counter()
        with vllm_served(python, path, max_images=max(turns)) as url:
            out["server_start_s"] = round(time.perf_counter() - started, 1)
            asyncio.run(_conversation(url, chat, pad, shots[:2], "delta", "warm-up"))
            asyncio.run(_conversation(url, chat, pad, shots[:2], "full", "warm-up-full"))
            for t in turns:
                measured: dict[str, list[dict]] = {s: [] for s in SCHEMES}
                for rep in range(runs):
                    for scheme in SCHEMES if rep % 2 == 0 else SCHEMES[::-1]:
                        tag = f"T{t}-{scheme}-{rep}"
                        measured[scheme].append(asyncio.run(_conversation(url, chat, pad, shots[:t], scheme, tag)))
                out[f"T{t}"] = _figures(measured, png_bytes[:t])
    return out


def _figures(measured: dict[str, list[dict]], png_bytes: list[int]) -> dict[str, Any]:
    for scheme, runs in measured.items():  # the bytes of one conversation do not vary between runs
        assert all(r["request_bytes"] == runs[0]["request_bytes"] for r in runs), (scheme, runs)
    first = {scheme: runs[0] for scheme, runs in measured.items()}
    out: dict[str, Any] = {
        "wire_bytes_full": first["full"]["request_bytes"],
        "wire_bytes_delta": first["delta"]["request_bytes"],
        "png_bytes_once": sum(png_bytes),
        "requests_full": first["full"]["requests"],
        "requests_delta": first["delta"]["requests"],
        "images_referenced_delta": first["delta"]["images_referenced"],
        "cache_misses_delta": max(r["cache_misses"] for r in measured["delta"]),
    }
    out["wire_full_over_delta"] = out["wire_bytes_full"] / out["wire_bytes_delta"]
    walls = {scheme: [r["wall_s"] for r in runs] for scheme, runs in measured.items()}
    out |= {f"wall_s_{scheme}": spread(values) for scheme, values in walls.items()}
    out["rollout_speedup"] = statistics.median(walls["full"]) / statistics.median(walls["delta"])
    return out


def headline(vllm: dict[str, Any], turns: tuple[int, ...] = (15, 50)) -> dict[str, Any]:
    """The figures ``--json`` leads with: wire bytes full/delta and the speedup at ``turns``, or the skip's reason."""
    if "skipped" in vllm:
        reason = f"skipped: {vllm['skipped']}"
        return {f"vllm_{name}_T{t}": reason for t in turns for name in ("wire_full_over_delta", "speedup")}
    return {
        f"vllm_{name}_T{t}": vllm[f"T{t}"][key]
        for t in turns
        for name, key in (("wire_full_over_delta", "wire_full_over_delta"), ("speedup", "rollout_speedup"))
    }
