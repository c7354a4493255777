"""``OpenAIEndpoint``: the inference client over HTTP, against ``vlrl serve`` and a scripted vLLM stand-in."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Callable

import numpy as np
import pytest
from aiohttp import web

from tests.helpers.chat import run_core, screen, user_turn
from tests.helpers.running import RunningServer
from vlrl.mm import content_hash, decode_image, encode_image
from vlrl.rollout.client import ContextImage, EndpointUnavailable, InferenceClient, TransientEndpointError
from vlrl.rollout.http_endpoint import OpenAIEndpoint
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, ImagePart, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=6)


@pytest.fixture(scope="module")
def server(tiny_path):
    running = RunningServer(tiny_path)
    yield running
    running.close()


class InProcess:
    """The engine core as an ``Endpoint`` in this process: what the HTTP path must reproduce."""

    name = "in-process"

    def __init__(self, core) -> None:
        self._core = core

    async def generate(self, request):
        return await self._core.generate(request)

    async def load(self) -> int:
        return self._core.load()

    async def forget(self, trajectory_id: str) -> None:
        self._core.forget(trajectory_id)


async def rollout(client, trajectory, processor, shots, between: Callable[[int], None] = lambda turn: None):
    """One screenshot per turn; each prompt extends the last with the sampled ids and a new user turn."""
    results: list[GenerateResult] = []
    prompt = np.zeros(0, np.int32)
    for turn, shot in enumerate(shots):
        between(turn)
        segment = user_turn(processor, f"step {turn}", [shot], first=turn == 0)
        prompt = np.concatenate([prompt, *(r.token_ids for r in results[-1:]), segment]).astype(np.int32)
        images = [ContextImage.of(s) for s in shots[: turn + 1]]
        results.append(await client.generate(trajectory, prompt, images, GREEDY, request_id=f"{trajectory}-{turn}"))
    await client.end_trajectory(trajectory)
    return results


async def over_http(url, body):
    endpoint = OpenAIEndpoint.Config(base_url=url + "/v1").build()
    client = InferenceClient([endpoint], InferenceClient.Config(backoff_s=0.05))
    try:
        return await body(endpoint, client), client.stats
    finally:
        await endpoint.close()


def test_a_trajectory_ships_each_image_once_and_matches_the_in_process_engine(server, tiny_path, processor):
    shots = [screen(320, 240, 60), screen(200, 150, 61), screen(320, 240, 62)]
    before = server.metrics()

    async def body(endpoint, client):
        assert await endpoint.load() == 0
        return await rollout(client, "http", processor, shots)

    results, stats = asyncio.run(over_http(server.url, body))
    reference = run_core(tiny_path, lambda core: rollout(InferenceClient([InProcess(core)]), "local", processor, shots))
    for got, want in zip(results, reference, strict=True):
        np.testing.assert_array_equal(got.token_ids, want.token_ids)
        np.testing.assert_array_equal(got.logprobs, want.logprobs)
        assert (got.finish_reason, got.prefill_tokens, got.reused_prefix_tokens) == (
            want.finish_reason, want.prefill_tokens, want.reused_prefix_tokens
        )
    assert results[2].reused_prefix_tokens > 0  # the trajectory id reached the engine
    after = server.metrics()
    assert after["images_received"] - before["images_received"] == 3
    assert after["image_bytes_received"] - before["image_bytes_received"] == sum(len(encode_image(s)) for s in shots)
    assert after["images_referenced"] - before["images_referenced"] == 0 + 1 + 2
    assert stats.image_bytes_sent == sum(s.nbytes for s in shots) and stats.cache_misses == 0


def test_a_restarted_server_misses_and_the_client_resends_only_the_missing(server, processor):
    shots = [screen(320, 240, 70), screen(320, 240, 71), screen(200, 150, 72)]
    restart = lambda turn: server.restart() if turn == 2 else None  # noqa: E731

    results, stats = asyncio.run(over_http(server.url, lambda _, client: rollout(client, "t", processor, shots, restart)))
    assert all(isinstance(r, GenerateResult) for r in results)
    assert stats.cache_misses == 2  # the two earlier screenshots, reported in one answer
    fresh = server.metrics()  # counters of the restarted server: each image arrived once
    assert (fresh["images_received"], fresh["cache_miss_replies"]) == (3, 1)
    assert fresh["image_bytes_received"] == sum(len(encode_image(s)) for s in shots)


class ScriptedServer:
    """Answers chat (or vLLM's generate) requests from a script, as a vLLM server would; records
    what it was sent."""

    def __init__(self, answers: list, owner: str = "vlrl") -> None:
        self.answers = answers
        self.owner = owner
        self.bodies: list[dict] = []
        self.released: asyncio.Event | None = None
        """A ``("hang", None)`` answer waits for it: set when the server stops, long after the
        client's timeout (no race between a sleep and that timeout)."""
        self.metrics = 'vllm:num_requests_running{engine="0"} 2.0\nvllm:num_requests_waiting{engine="0"} 3.0\n'

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": self.owner}]})

    async def chat(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        status, body = self.answers.pop(0)
        if status == "hang":
            await self.released.wait()
            return web.json_response({})
        return web.json_response(body, status=status)

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(text=self.metrics)

    async def serve(self, test, **config):
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/inference/v1/generate", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/metrics", self.prometheus)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        self.released = asyncio.Event()
        config = {"model": "m", "request_timeout_s": 5.0, **config}  # ample for a local answer on a loaded machine
        image_token_id = config.pop("image_token_id", None)
        endpoint = OpenAIEndpoint.Config(base_url=f"http://127.0.0.1:{port}", **config).build(image_token_id=image_token_id)
        try:
            return await test(endpoint)
        finally:
            self.released.set()
            await endpoint.close()
            await runner.cleanup()


def completion(prompt_ids, token_ids=(5, 2), finish="stop") -> dict:
    return {
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "token_ids": list(token_ids),
                "logprobs": {"content": [{"token": "t", "logprob": -0.5} for _ in token_ids]},
            }
        ],
        "prompt_token_ids": [int(i) for i in prompt_ids],
        "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 3}},
    }


def test_the_wire_format_and_how_vllm_style_answers_map_onto_the_client_contract():
    old, new = screen(64, 48, 80), screen(64, 48, 81)
    prompt = np.arange(10, dtype=np.int32)
    images = (ImagePart(content_hash(old), 64, 48), ImagePart(content_hash(new), 64, 48, new))
    request = GenerateRequest("r1", "t1", prompt, images, SamplingParams(temperature=0.5, max_tokens=4, seed=3))
    vllm_miss = {"error": {"message": "Cache miss for image at index 0 but data is not provided.", "type": "BadRequestError", "code": 400}}
    scripted = ScriptedServer(
        [
            (400, vllm_miss),
            (200, completion(prompt)),
            (200, completion([1, 2, 3])),  # a server that templated its own prompt
            (503, {"error": {"message": "overloaded"}}),
            (429, {"error": {"message": "slow down"}}),
            ("hang", None),
            (400, {"error": {"message": "max_tokens: too many", "type": "BadRequestError", "code": 400}}),
        ]
    )

    async def test(endpoint):
        assert await endpoint.generate(request) == CacheMiss("r1", (content_hash(old),))
        result = await endpoint.generate(request)
        assert (result.token_ids.tolist(), result.logprobs.tolist(), result.finish_reason) == ([5, 2], [-0.5, -0.5], "stop")
        assert (result.prefill_tokens, result.reused_prefix_tokens, result.policy_version) == (7, 3, 0)
        with pytest.raises(ValueError, match="did not run the prompt_token_ids sent"):
            await endpoint.generate(request)
        for expected in ("HTTP 503: overloaded", "HTTP 429: slow down", "timed out|TimeoutError"):
            with pytest.raises(TransientEndpointError, match=expected):
                await endpoint.generate(request)
        with pytest.raises(ValueError, match="HTTP 400: max_tokens: too many"):
            await endpoint.generate(request)
        assert await endpoint.load() == 5

    asyncio.run(scripted.serve(test))
    body = scripted.bodies[0]
    reference, shipped = body["messages"][0]["content"]
    assert reference == {"type": "image_url", "image_url": None, "uuid": content_hash(old)}
    assert shipped["uuid"] == content_hash(new)
    header, payload = shipped["image_url"]["url"].split(",")
    assert header == "data:image/png;base64"
    np.testing.assert_array_equal(decode_image(base64.b64decode(payload)), new)
    assert {k: body[k] for k in body if k != "messages"} == {
        "model": "m",
        "prompt_token_ids": list(range(10)),
        "request_id": "r1",
        "trajectory_id": "t1",
        "max_tokens": 4,
        "temperature": 0.5,
        "top_p": 1.0,
        "seed": 3,
        "stop_token_ids": [],
        "logprobs": True,
        "return_token_ids": True,
    }


def test_vllm_serve_is_spoken_to_through_its_token_in_route():
    """``vllm serve --enable-scale-out``, found by /v1/models: token ids with each image's pad run
    collapsed to one pad, images as content_parts by uuid, vLLM's sampling parameters; the
    expanded prompt it echoes is checked against the ids sent; its cache-miss 400 is a CacheMiss."""
    pad = 7
    old, new = screen(64, 48, 80), screen(64, 48, 81)
    prompt = np.array([1, 2, pad, pad, pad, 3, pad, pad, 4], dtype=np.int32)
    images = (ImagePart(content_hash(old), 64, 48), ImagePart(content_hash(new), 64, 48, new))
    request = GenerateRequest("r1", "t1", prompt, images, SamplingParams(temperature=0.5, max_tokens=4, seed=3))
    vllm_miss = {"error": {"message": "Cache miss for image at index 0 but data is not provided.", "type": "BadRequestError", "code": 400}}
    scripted = ScriptedServer([(400, vllm_miss), (200, completion(prompt)), (200, completion([1, 2, pad, 3, pad, 4]))], owner="vllm")

    async def test(endpoint):
        assert await endpoint.generate(request) == CacheMiss("r1", (content_hash(old),))
        result = await endpoint.generate(request)
        assert (result.token_ids.tolist(), result.logprobs.tolist(), result.finish_reason) == ([5, 2], [-0.5, -0.5], "stop")
        with pytest.raises(ValueError, match="did not run the prompt_token_ids sent"):  # pads not expanded back
            await endpoint.generate(request)

    asyncio.run(scripted.serve(test, image_token_id=pad))
    body = scripted.bodies[0]
    assert body["token_ids"] == [1, 2, pad, 3, pad, 4]
    reference, shipped = body["content_parts"]
    assert reference == {"type": "image_url", "url": None, "uuid": content_hash(old)}
    assert shipped["uuid"] == content_hash(new)
    np.testing.assert_array_equal(decode_image(base64.b64decode(shipped["url"].split(",")[1])), new)
    assert body["sampling_params"] == {"max_tokens": 4, "temperature": 0.5, "top_p": 1.0, "seed": 3, "stop_token_ids": [], "logprobs": 0}
    assert body["return_token_ids"] is True and body["model"] == "m"

    # Without the checkpoint's image token id the pads cannot be collapsed: refused before sending.
    async def without_pad(endpoint):
        with pytest.raises(ValueError, match="needs the checkpoint's image_token_id"):
            await endpoint.generate(request)

    asyncio.run(ScriptedServer([], owner="vllm").serve(without_pad))


def test_a_server_that_cannot_be_reached_is_unavailable():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = OpenAIEndpoint.Config(base_url=f"http://127.0.0.1:{port}", model="m").build()
    request = GenerateRequest("r", "t", np.arange(3, dtype=np.int32))

    async def test():
        try:
            with pytest.raises(EndpointUnavailable, match="cannot connect"):
                await endpoint.generate(request)
            with pytest.raises(EndpointUnavailable):
                await endpoint.load()
        finally:
            await endpoint.close()

    asyncio.run(test())


def test_webp_ships_losslessly():
    shot = screen(64, 48, 90)
    scripted = ScriptedServer([(200, completion([1]))])

    async def test(endpoint):
        await endpoint.generate(GenerateRequest("r", "t", np.array([1], np.int32), (ImagePart(content_hash(shot), 64, 48, shot),)))

    asyncio.run(scripted.serve(test, image_format="webp"))
    url = scripted.bodies[0]["messages"][0]["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/webp;base64,")
    np.testing.assert_array_equal(decode_image(base64.b64decode(url.split(",")[1])), shot)
