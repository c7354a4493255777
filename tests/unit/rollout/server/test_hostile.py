"""``vlrl serve`` under hostile or broken requests: each is a 4xx error in OpenAI's JSON shape,
the innocent requests beside it all get a 200, and the server's memory stays within its caps."""

from __future__ import annotations

import asyncio
import base64
import gzip
import http.client
import io
import json
import shutil
import socket
import struct
import threading
import time
import urllib.request
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil
import pytest
from PIL import Image

from tests.helpers.chat import GREEDY, request, run_core, screen, user_turn
from tests.helpers.running import RunningServer
from vlrl.config import ConfigError
from vlrl.mm import encode_image
from vlrl.rollout.http_endpoint import parse_metrics
from vlrl.rollout.protocol import SamplingParams
from vlrl.rollout.server.prompt import ChatTemplate

KEY = "hostile-key"
MAX_REQUEST_MB = 2.0
MAX_IMAGES = 8
MAX_IMAGE_PIXELS = 1000 * 1000
MAX_REQUEST_PIXELS = 1000 * 1000
RSS_MARGIN = 96 * 2**20
"""Beyond the pixel cap's decoded bytes: batches, threads and buffers of 64 requests at once."""


@pytest.fixture(scope="module")
def server(tiny_path):
    running = RunningServer(
        tiny_path,
        engine={"max_batch": 8, "batch_wait_ms": 50.0, "image_cache_mb": 32.0},
        api_key=KEY,
        max_request_mb=MAX_REQUEST_MB,
        max_images=MAX_IMAGES,
        max_image_pixels=MAX_IMAGE_PIXELS,
        max_request_pixels=MAX_REQUEST_PIXELS,
        max_queued=64,
    )
    yield running
    running.close()


# -- requests


@dataclass(frozen=True)
class Call:
    """One POST /v1/chat/completions and what it must get: a 200, or an error naming ``message``."""

    name: str
    body: bytes
    status: int = 200
    message: str = ""
    headers: tuple[tuple[str, str | bytes], ...] = ()


def post(url: str, call: Call) -> tuple[int, dict[str, str], Any]:
    """Send ``call`` byte for byte (http.client takes bytes header values); the answer must be JSON."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        connection.putrequest("POST", "/v1/chat/completions")
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}", **dict(call.headers)}
        for name, value in headers.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(call.body)))
        connection.endheaders(call.body)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        connection.close()


def check(call: Call, status: int, answer: Any) -> None:
    if call.status == 200:
        assert status == 200, (call.name, answer)
        assert answer["choices"][0]["message"]["role"] == "assistant", call.name
        return
    assert 400 <= status < 500 and status == call.status, (call.name, status, answer)
    error = answer["error"]
    assert set(error) >= {"message", "type", "param", "code"} and error["code"] == status, (call.name, error)
    assert call.message in error["message"], (call.name, error)


def chat(content: Any, **fields: Any) -> bytes:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 2, "temperature": 0, **fields}
    return json.dumps(body).encode()


def black_png(width: int, height: int, marker: int = 0) -> bytes:
    """Mostly black, so a large image is a few KiB of PNG; ``marker`` makes distinct bytes. PIL
    writes it, as a client would, whatever vlrl itself accepts."""
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[0, 0, 0] = marker
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def png_claiming(width: int, height: int) -> bytes:
    """A PNG header for a huge image, with no pixel data behind it."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def image(data: bytes | None, uuid: str | None = None, kind: str = "png", url: str | None = None) -> dict:
    if url is None and data is not None:
        url = f"data:image/{kind};base64," + base64.b64encode(data).decode()
    part: dict[str, Any] = {"type": "image_url", "image_url": None if url is None else {"url": url}}
    return part if uuid is None else {**part, "uuid": uuid}


def text(words: str) -> dict:
    return {"type": "text", "text": words}


SHOT = screen(320, 240, 50)
SCREEN_PNG = encode_image(SHOT)
MID_PNG = black_png(800, 600)
"""480,000 pixels: under the request cap once, over it three times."""
TINY_PNG = encode_image(screen(16, 16, 51))
WEBP_BOMB = encode_image(np.zeros((4096, 4096, 3), np.uint8), "webp", lossless=True)
BAD = "messages[0].content[0].image_url.url"


def innocent_calls(processor: Any) -> list[Call]:
    token_in = user_turn(processor, "type hello", [SHOT]).tolist()
    return [
        Call("text", chat("click the OK button")),
        Call("text, sampled with a seed", chat("scroll down", temperature=0.7, top_p=0.9, seed=7, max_tokens=4)),
        Call("a screenshot", chat([image(SCREEN_PNG), text("click OK")])),
        Call("a screenshot by uuid", chat([image(SCREEN_PNG, "innocent-shot"), text("click OK")])),
        Call("the screenshot by reference", chat([image(None, "innocent-shot"), text("again")])),
        Call("token-in", chat([image(SCREEN_PNG)], prompt_token_ids=token_in, return_token_ids=True, logprobs=True)),
        Call("one pixel", chat([image(encode_image(np.zeros((1, 1, 3), np.uint8))), text("what is it")])),
        Call("a 27x27 icon", chat([image(black_png(27, 27)), text("what is it")])),
        Call("a 1x150 strip, within the aspect limit", chat([image(black_png(150, 1))])),
        Call("copies of one image count once", chat([image(MID_PNG)] * 5)),
        Call("parts sharing a uuid decode once", chat([image(MID_PNG, "twin"), image(black_png(800, 600, 9), "twin")])),
        Call("the edge of every sampling range", chat("hi", temperature=1e-5, top_p=1e-46, seed=2**63 - 1)),
        Call("a stop string and stop ids", chat("hi", stop=["<|im_end|>"], stop_token_ids=[2], max_tokens=3)),
        Call("a non-UTF-8 header the server ignores", chat("hi"), headers=(("X-Trace", b"\xff\xfe"),)),
        Call("a gzip body", gzip.compress(chat("hi")), headers=(("Content-Encoding", "gzip"),)),
    ]


def hostile_calls() -> list[Call]:
    deep = b"[" * 100_000 + b"]" * 100_000
    return [
        # JSON and headers
        Call("malformed JSON", b'{"messages": [', 400, "not valid JSON"),
        Call("JSON nested 100,000 deep", deep, 400, "deeper than 32 levels"),
        Call("JSON nested 40 deep", b'{"messages": ' + b"[" * 40 + b"]" * 40 + b"}", 400, "deeper than 32 levels"),
        Call("non-UTF-8 body", b'{"messages": "\xff\xfe"}', 400, "not valid JSON"),
        Call("a lone surrogate", b'{"messages": [{"role": "user", "content": "a\\ud800"}]}', 400, "lone UTF-16"),
        Call("a lone surrogate stop", chat("hi", stop="\ud800"), 400, "lone UTF-16"),
        Call("a non-UTF-8 API key", chat("hi"), 401, "invalid or missing API key", (("Authorization", b"Bearer \xff"),)),
        Call("no API key", chat("hi"), 401, "invalid or missing API key", (("Authorization", ""),)),
        Call("a corrupt gzip body", b"\x1f\x8b\x08\x00corrupt" * 8, 400, "cannot be read", (("Content-Encoding", "gzip"),)),
        Call(
            "a gzip bomb body",
            gzip.compress(b" " * (64 << 20)),
            413,
            "larger than 2 MiB",
            (("Content-Encoding", "gzip"),),
        ),
        Call("a body over the limit", b" " * int(MAX_REQUEST_MB * 2**20 + 1), 413, "--max-request-mb"),
        # sampling values that would fail the batch they join
        Call("seed 2**64", chat("hi", temperature=1.0, seed=2**64), 400, "seed: 18446744073709551616"),
        Call("a negative seed", chat("hi", temperature=1.0, seed=-1), 400, "seed: -1; expected an integer in [0,"),
        Call("a denormal temperature", chat("hi", temperature=5e-324), 400, "expected 0 (greedy) or a number in [1e-05"),
        Call("temperature 1e-6", chat("hi", temperature=1e-6), 400, "expected 0 (greedy)"),
        Call("temperature 10**400", chat("hi", temperature=10**400), 400, "expected a number in [0, 2]"),
        Call("top_p 0", chat("hi", top_p=0), 400, "expected a number in (0, 1]"),
        Call("max_tokens 0", chat("hi", max_tokens=0), 400, "expected an integer >= 1"),
        Call("max_tokens 10**30", chat("hi", max_tokens=10**30), 400, "exceed the model's context of 4096 tokens"),
        Call("logprobs as a string", chat("hi", logprobs="yes"), 400, "expected a boolean"),
        Call("a stop id beyond the vocabulary", chat("hi", stop_token_ids=[1024]), 400, "vocab_size=1024"),
        Call("an unknown model", chat("hi", model="other"), 404, "does not exist"),
        # images
        Call("more images than allowed", chat([image(TINY_PNG)] * (MAX_IMAGES + 1)), 400, "--max-images"),
        Call(
            "distinct images over the pixel cap",
            chat([image(black_png(800, 600, marker)) for marker in (1, 2, 3)]),
            400,
            f"hold 1440000 pixels; at most {MAX_REQUEST_PIXELS} per request",
        ),
        Call("a 4000x4000 PNG bomb", chat([image(black_png(4000, 4000))]), 400, f"at most max_pixels={MAX_IMAGE_PIXELS}"),
        Call("a 4096x4096 WebP bomb", chat([image(WEBP_BOMB, kind="webp")]), 400, f"max_pixels={MAX_IMAGE_PIXELS}"),
        Call("a header claiming 60000x60000", chat([image(png_claiming(60_000, 60_000))]), 400, "image:"),
        Call("a 1x300 strip", chat([image(black_png(300, 1))]), 400, "aspect ratio 300.0; the Qwen2-VL processor accepts at most 200"),
        Call("a 1x100000 strip", chat([image(black_png(100_000, 1))]), 400, "accepts at most 200"),
        Call("a truncated PNG", chat([image(SCREEN_PNG[: len(SCREEN_PNG) // 2])]), 400, "corrupt or truncated PNG"),
        Call("a text file as an image", chat([image(b"just some text\n" * 20)]), 400, "unsupported or unknown format"),
        Call("an empty image", chat([image(b"")]), 400, "empty data"),
        Call("a file URL", chat([image(None, url="file:///etc/passwd")]), 400, "URL scheme 'file'"),
        Call("a remote URL", chat([image(None, url="http://169.254.169.254/latest")]), 400, "remote image URLs are refused"),
        Call("a reference never sent", chat([image(None, "never-sent")]), 400, "Cache miss for image at index 0"),
    ]


HOSTILE = hostile_calls()


@pytest.fixture(scope="module")
def innocent(processor):
    return innocent_calls(processor)


# -- every class alone


@pytest.mark.parametrize("call", HOSTILE, ids=lambda call: call.name)
def test_each_hostile_request_gets_a_json_4xx(server, call):
    check(*_sent(server, call))


def test_each_innocent_request_gets_a_200(server, innocent):
    for call in innocent:
        check(*_sent(server, call))


def test_identical_parts_decode_once_and_the_pixel_cap_is_read_from_headers(server):
    decoded = server.metrics()["images_decoded"]
    check(*_sent(server, Call("copies", chat([image(MID_PNG)] * 5))))
    check(*_sent(server, Call("twins", chat([image(MID_PNG, "a"), image(black_png(800, 600, 9), "a")]))))
    assert server.metrics()["images_decoded"] == decoded + 2
    # The third image's pixel data is cut short: decoding it would fail, so the cap came first.
    cut = black_png(800, 600, 3)
    over = Call(
        "over the cap",
        chat([image(black_png(800, 600, 1)), image(black_png(800, 600, 2)), image(cut[: len(cut) // 2])]),
        400,
        "hold 1440000 pixels",
    )
    check(*_sent(server, over))
    assert server.metrics()["images_decoded"] == decoded + 2


def _sent(server: RunningServer, call: Call) -> tuple[Call, int, Any]:
    status, _, answer = post(server.url, call)
    return call, status, answer


@pytest.mark.parametrize(
    "field, value",
    [("seed", 2**64), ("seed", -3), ("temperature", 5e-324), ("top_p", 1e-46), ("stop_token_ids", [10**6])],
)
def test_one_bad_sampling_value_never_fails_the_requests_batched_with_it(server, field, value):
    good = [Call(f"good {i}", chat("hi", temperature=1.0, seed=i, max_tokens=4)) for i in range(7)]
    odd = Call(f"{field}={value}", chat("hi", **{"temperature": 1.0, "max_tokens": 4, field: value}))
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda call: post(server.url, call), [*good, odd]))
    for call, (status, _, answer) in zip(good, answers):
        check(call, status, answer)
    status, _, answer = answers[-1]
    if field == "top_p":  # tiny but valid: the top token is always kept
        assert status == 200, answer
    else:
        assert status == 400 and answer["error"]["param"] == field, answer


def test_the_engine_refuses_them_too_before_they_join_a_batch(tiny_path, processor):
    prompt = user_turn(processor, "hi", [])

    async def body(core):
        bad = [SamplingParams(temperature=1.0, seed=2**64), SamplingParams(temperature=5e-324)]
        calls = [core.generate(request(prompt, sampling=s)) for s in (GREEDY, *bad, GREEDY)]
        return await asyncio.gather(*calls, return_exceptions=True)

    first, seed, temperature, last = run_core(tiny_path, body, batch_wait_ms=50.0)
    assert len(first.token_ids) and len(last.token_ids)
    assert isinstance(seed, ValueError) and "seed=18446744073709551616" in str(seed)
    assert isinstance(temperature, ValueError) and "expected 0 (greedy) or >= 1e-05" in str(temperature)


# -- all at once


def test_64_concurrent_requests_mixing_hostile_and_innocent_ones(server, innocent):
    """Innocent ones all get a 200, hostile ones a JSON 4xx, and RSS grows by less than the pixel cap
    (3 bytes a pixel) plus a margin, though the hostile requests ask for far more."""
    for call in innocent:  # warm every innocent path once, so the baseline holds their buffers
        post(server.url, call)
    heavy = Call(
        "three 1000x1000 images",
        chat([image(black_png(1000, 1000, marker)) for marker in range(3)]),
        400,
        "--max-request-pixels",
    )
    hostile = [*HOSTILE, *[heavy] * 12]
    calls = [*hostile, *innocent, *innocent][:64]
    order = np.random.default_rng(0).permutation(len(calls))
    calls = [calls[i] for i in order]
    process, peak, done = psutil.Process(), [0], threading.Event()
    baseline = process.memory_info().rss

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        with ThreadPoolExecutor(len(calls)) as pool:
            answers = list(pool.map(lambda call: post(server.url, call), calls))
    finally:
        done.set()
        sampler.join()
    for call, (status, _, answer) in zip(calls, answers):
        check(call, status, answer)
    growth = peak[0] - baseline
    assert growth < 3 * MAX_REQUEST_PIXELS + RSS_MARGIN, f"RSS grew by {growth / 2**20:.0f} MiB"
    with urllib.request.urlopen(server.url + "/health") as response:
        assert response.status == 200
    check(*_sent(server, innocent[0]))


# -- tokenizing, the queue, disconnects, the context


def test_a_large_body_is_tokenized_off_the_event_loop(server, monkeypatch):
    """The tokenizer is held mid-call until ``/health`` has answered: on the event loop, the
    health check could not answer (and the test would fail on its timeout); off it, it does,
    however long tokenizing takes on this machine."""
    template = server._server._template
    tokenizing, answered = threading.Event(), threading.Event()

    def held_prompt_ids(*args, **kwargs):
        tokenizing.set()
        answered.wait(timeout=120)
        return ChatTemplate.prompt_ids(template, *args, **kwargs)

    monkeypatch.setattr(template, "prompt_ids", held_prompt_ids)
    words = "click the ok button " * 80_000  # 1.6 MB: its tokens far exceed the context
    big = Call("1.6 MB of text", chat(words), 400, "exceed the model's context")
    outcome: list[Any] = []
    sender = threading.Thread(target=lambda: outcome.append(_sent(server, big)))
    sender.start()
    try:
        assert tokenizing.wait(timeout=120), "the request never reached the tokenizer"
        with urllib.request.urlopen(server.url + "/health", timeout=60) as response:
            assert response.status == 200
    finally:
        answered.set()
        sender.join()
    check(*outcome[0])


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics") as response:
        return parse_metrics(response.read().decode())


def _held(url: str) -> float:
    return _metrics(url)["vllm:num_requests_running"]


def _wait(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_full_queue_answers_429_and_disconnected_requests_free_their_slot(tiny_path):
    running = RunningServer(tiny_path, engine={"max_batch": 1}, max_queued=1)
    try:
        host, port = running.url.removeprefix("http://").rsplit(":", 1)
        long_greedy = chat("hi", max_tokens=3000)  # about 15 s of decoding here, unless cancelled
        held = []
        for _ in range(2):  # one runs, one waits for the batch slot
            connection = socket.create_connection((host, int(port)))
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(long_greedy)}\r\n\r\n"
            connection.sendall(head.encode() + long_greedy)
            held.append(connection)
        assert _wait(lambda: _held(running.url) == 2, 120)

        status, headers, answer = post(running.url, Call("one more", chat("hi")))
        assert status == 429 and headers["Retry-After"] == "1", answer
        assert answer["error"]["type"] == "RateLimitError" and "--max-queued" in answer["error"]["message"]

        for connection in held:  # the waiting one is dropped, the running one leaves its batch
            connection.close()
        assert _wait(lambda: _held(running.url) == 0, 120)
        check(*_sent(running, Call("after", chat("hi"))))
        # the slot is free: the long batch was cut, not decoded to its end ahead of this request
        assert _metrics(running.url)["vlrl:engine_generated_tokens"] < 3000
    finally:
        running.close()


@pytest.fixture(scope="module")
def short_context_path(tiny_path, tmp_path_factory):
    """The tiny checkpoint with max_position_embeddings=1024 and a tokenizer without
    model_max_length (transformers then reports 1e30)."""
    path = tmp_path_factory.mktemp("short-context") / "model"
    shutil.copytree(tiny_path, path)
    config = json.loads((path / "config.json").read_text())
    config["text_config"]["max_position_embeddings"] = 1024
    (path / "config.json").write_text(json.dumps(config))
    tokenizer = json.loads((path / "tokenizer_config.json").read_text())
    tokenizer.pop("model_max_length", None)
    (path / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    return path


def test_the_context_defaults_to_the_models_max_position_embeddings(short_context_path):
    running = RunningServer(short_context_path)
    try:
        with urllib.request.urlopen(running.url + "/v1/models") as response:
            assert json.loads(response.read())["data"][0]["max_model_len"] == 1024
        status, answer = running.post("/v1/chat/completions", json.loads(chat("hi", max_tokens=1020)))
        assert status == 400 and answer["error"]["param"] == "max_tokens", answer
        assert "tokens plus max_tokens=1020 exceed the model's context of 1024 tokens" in answer["error"]["message"]
        assert running.post("/v1/chat/completions", json.loads(chat("hi", max_tokens=4)))[0] == 200
    finally:
        running.close()
    with pytest.raises(ConfigError, match="max_position_embeddings, 1024"):
        RunningServer(short_context_path, max_model_len=2048)
