"""Check vLLM against the wire protocol of ``vlrl serve`` / ``OpenAIEndpoint`` (needs a GPU and vLLM >= 0.11).

    python scripts/gpu/check_vllm.py --start                       # launch `vllm serve` on Qwen2-VL-2B
    python scripts/gpu/check_vllm.py --url http://127.0.0.1:8000   # or check a server already running

Each CHECK must hold for ``OpenAIEndpoint`` to work against vLLM; the script exits 1 if one fails.
Each PROBE reports a behaviour vlrl does not rely on yet (printed, never failing):

- CHECK an image part with a ``uuid`` and a data URL is served, with ``return_token_ids`` and
  ``logprobs``; the prompt's ``<|image_pad|>`` run has the length vlrl's ``PatchRule`` predicts;
- CHECK the same uuid with ``"image_url": null`` is served from vLLM's cache, same prompt ids;
- CHECK a uuid vLLM does not hold gets a 400 that ``missing_images`` reads as that uuid, and
  resending the bytes succeeds (the client's miss -> resend loop);
- CHECK ``OpenAIEndpoint.load()`` reads vLLM's ``/metrics``;
- PROBE does the chat endpoint run ``prompt_token_ids`` (vlrl's token-in extension)? Expected:
  no (vLLM templates the messages itself, and ``OpenAIEndpoint`` reports that as an error).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import subprocess
import sys
import time
import urllib.request

import aiohttp
import numpy as np

from vlrl.mm import content_hash, encode_image
from vlrl.rollout.http_endpoint import OpenAIEndpoint, missing_images
from vlrl.rollout.protocol import GenerateRequest, ImagePart, SamplingParams

failures: list[str] = []


def report(kind: str, ok: bool, what: str) -> None:
    print(f"{kind} {'ok  ' if ok else 'FAIL' if kind == 'CHECK' else 'no  '} {what}", flush=True)
    if kind == "CHECK" and not ok:
        failures.append(what)


def screenshot(seed: int, width: int = 640, height: int = 480) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pixels = np.full((height, width, 3), rng.integers(0, 256, 3), dtype=np.uint8)
    pixels[height // 4 : height // 2, width // 4 : width // 2] = rng.integers(0, 256, 3)
    return pixels


def image_part(pixels: np.ndarray | None, uuid: str) -> dict:
    if pixels is None:
        return {"type": "image_url", "image_url": None, "uuid": uuid}
    url = "data:image/png;base64," + base64.b64encode(encode_image(pixels)).decode()
    return {"type": "image_url", "image_url": {"url": url}, "uuid": uuid}


async def chat(session: aiohttp.ClientSession, url: str, model: str, parts: list[dict]) -> tuple[int, dict]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": "Click the button."}]}],
        "max_tokens": 8,
        "temperature": 0,
        "logprobs": True,
        "return_token_ids": True,
    }
    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
        return response.status, await response.json()


async def check(url: str, api_key: str | None) -> None:
    from transformers import AutoProcessor

    from vlrl.mm import patch_rule_of

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(f"{url}/v1/models") as response:
            model = (await response.json())["data"][0]["id"]
        processor = AutoProcessor.from_pretrained(model)
        pad = processor.tokenizer.convert_tokens_to_ids(processor.image_token)
        shot, other = screenshot(0), screenshot(1)
        uuid = content_hash(shot)

        status, sent = await chat(session, url, model, [image_part(shot, uuid)])
        choice = sent.get("choices", [{}])[0]
        ok = status == 200 and "prompt_token_ids" in sent and "token_ids" in choice
        report("CHECK", ok, f"image with data URL + uuid is served with token ids (HTTP {status})")
        if not ok:
            print(sent)
            return
        logprobs = (choice.get("logprobs") or {}).get("content") or []
        report("CHECK", len(logprobs) == len(choice["token_ids"]), "one logprob per generated token")
        expected = patch_rule_of(processor).num_tokens(shot.shape[1], shot.shape[0])
        pads = sent["prompt_token_ids"].count(pad)
        report("CHECK", pads == expected, f"{pads} <|image_pad|> tokens in vLLM's prompt; PatchRule says {expected}")

        status, reused = await chat(session, url, model, [image_part(None, uuid)])
        same = status == 200 and reused.get("prompt_token_ids") == sent["prompt_token_ids"]
        report("CHECK", same, f"'image_url': null + the same uuid reuses the image (HTTP {status})")

        never = content_hash(other)
        status, miss = await chat(session, url, model, [image_part(None, uuid), image_part(None, never)])
        found = missing_images(miss, [uuid, never]) if status == 400 else ()
        report("CHECK", found == (never,), f"an unknown uuid is a 400 read as missing {found}: {miss}")
        status, _ = await chat(session, url, model, [image_part(None, uuid), image_part(other, never)])
        report("CHECK", status == 200, f"resending the missing image succeeds (HTTP {status})")

    endpoint = OpenAIEndpoint.Config(base_url=url, model=model, api_key=api_key).build()
    try:
        load = await endpoint.load()
        report("CHECK", load >= 0, f"load() from /metrics: {load}")
        prompt = np.asarray(sent["prompt_token_ids"], dtype=np.int32)
        request = GenerateRequest("probe", "probe", prompt, (ImagePart(uuid, 640, 480),), SamplingParams(max_tokens=4))
        try:
            await endpoint.generate(request)
            report("PROBE", True, "vLLM runs prompt_token_ids on chat: OpenAIEndpoint's token-in works")
        except ValueError as error:
            report("PROBE", False, f"token-in over vLLM's chat endpoint ({error})")
    finally:
        await endpoint.close()


def start_vllm(model: str, port: int) -> subprocess.Popen:
    command = [
        "vllm", "serve", model, "--port", str(port), "--max-model-len", "8192", "--enforce-eager",
        "--limit-mm-per-prompt", '{"image": 4}', "--gpu-memory-utilization", "0.6",
    ]  # fmt: skip
    print("starting:", " ".join(command), flush=True)
    server = subprocess.Popen(command)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if server.poll() is not None:
            sys.exit(f"vllm serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return server
        except OSError:  # not listening yet, or not healthy yet
            time.sleep(5)
    server.kill()
    sys.exit("vllm serve did not become healthy in 15 minutes")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="root URL of a running vLLM server")
    target.add_argument("--start", action="store_true", help="start `vllm serve MODEL` here and stop it after")
    parser.add_argument("--model", default="Qwen/Qwen2-VL-2B-Instruct", help="model for --start (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8011, help="port for --start (default: %(default)s)")
    parser.add_argument("--api-key", help="bearer token the server wants, if any")
    args = parser.parse_args()
    server = start_vllm(args.model, args.port) if args.start else None
    try:
        asyncio.run(check(args.url or f"http://127.0.0.1:{args.port}", args.api_key))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
    print("all checks hold" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
