"""Engine faults: a crashed replica comes back with the latest pushed weights (and a push while it
is down does not fail), errors are classified the same over Ray and HTTP (a bad request or an
engine failure is never retried, a server's "try later" is), and cache-miss resends are bounded
per turn."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from aiohttp import web

from tests.helpers.chat import perturbed
from tests.helpers.running import RunningServer
from tests.unit.rollout.test_http_endpoint import completion
from vlrl.rollout.client import BadRequestError, ContextImage, EngineError, InferenceClient, InferenceError
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.rollout.engine.weights_keeper import weights_keeper
from vlrl.rollout.http_endpoint import OpenAIEndpoint
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, SamplingParams
from vlrl.rollout.ray_endpoint import RayEndpoint
from vlrl.train.trainer_group import TrainerGroup

GREEDY = SamplingParams(temperature=0.0, max_tokens=2)
PROMPT = np.arange(10, 18, dtype=np.int32)  # plain text ids: no image or vision tokens
OUT_OF_VOCAB = np.asarray([1, 2, 10**8], np.int32)


class Rank0:
    """A trainer rank 0 as ``push_weights`` sees it: each gather returns new weights."""

    def __init__(self, model_path: str) -> None:
        self._model_path = model_path
        self._gathers = 0

    def weights(self, merged: bool = False) -> dict[str, np.ndarray]:
        self._gathers += 1
        return perturbed(self._model_path, scale=0.05 * self._gathers)


def _pusher(ray, model_path: str) -> TrainerGroup:
    """The real ``TrainerGroup.push_weights`` over one stand-in rank (no optimizer needed)."""
    group = object.__new__(TrainerGroup)
    group.workers = [ray.remote(Rank0).options(num_cpus=0).remote(model_path)]
    return group


def test_a_restarted_replica_serves_the_latest_pushed_weights(ray_session, tiny_path):
    ray = ray_session
    engine = EmbeddedEngine.Config(cpus=0, torch_threads=1).build(model_path=str(tiny_path))
    keeper = weights_keeper(engine)
    group = _pusher(ray, str(tiny_path))
    client = InferenceClient([RayEndpoint(engine, "engine")], InferenceClient.Config(backoff_s=0.5, retries=8))

    def turn(n: int):
        return asyncio.run(client.generate("t", PROMPT, [], GREEDY, request_id=f"r{n}"))

    def scores() -> np.ndarray:
        return ray.get(engine.score.remote(GenerateRequest("s", "s", PROMPT))).logprobs

    try:
        assert keeper is not None
        base = scores()
        group.push_weights([engine], 1, [keeper])
        assert turn(1).policy_version == 1
        pushed = scores()
        assert not np.allclose(base[1:], pushed[1:], atol=1e-4)

        ray.kill(engine, no_restart=False)  # mid-run: the next turn rides out the restart
        assert turn(2).policy_version == 1
        np.testing.assert_allclose(scores()[1:], pushed[1:], atol=1e-6)  # the weights, not only the number

        ray.kill(engine, no_restart=False)
        group.push_weights([engine], 2, [keeper])  # while it is down: no error
        assert turn(3).policy_version == 2
        assert ray.get(engine.stats.remote())["policy_version"] == 2
        assert not np.allclose(scores()[1:], pushed[1:], atol=1e-4)
    finally:
        ray.kill(engine)


def test_a_bad_request_is_not_retried_over_ray_and_reaches_the_caller_whole(ray_session, tiny_path):
    engine = EmbeddedEngine.Config(cpus=0, torch_threads=1).build(model_path=str(tiny_path))
    try:
        client = InferenceClient([RayEndpoint(engine, "engine-1")], InferenceClient.Config(backoff_s=0, retries=3))
        with pytest.raises(BadRequestError) as caught:
            asyncio.run(client.generate("t", OUT_OF_VOCAB, [], GREEDY, request_id="r0"))
        assert ray_session.get(engine.stats.remote())["requests"] == 1
        # The engine's own message, named by the replica, without Ray's traceback decoration.
        message = str(caught.value)
        assert message.startswith("engine engine-1: generate raised ValueError: request r0: prompt_ids hold ids in [1, 100000000]")
        assert "expected 0 <= id < vocab_size=" in message
        assert "\x1b[" not in message and "ray::" not in message and "pid=" not in message
    finally:
        ray_session.kill(engine)


def test_a_bad_request_is_not_retried_over_http(tiny_path):
    server = RunningServer(tiny_path)
    try:

        async def body():
            endpoint = OpenAIEndpoint.Config(base_url=server.url, model=server.model).build()
            client = InferenceClient([endpoint], InferenceClient.Config(backoff_s=0, retries=3))
            try:
                await client.generate("t", OUT_OF_VOCAB, [], GREEDY, request_id="r0")
            finally:
                await endpoint.close()

        before = server.metrics()["requests"]
        with pytest.raises(BadRequestError, match="HTTP 400: .*vocab"):
            asyncio.run(body())
        assert server.metrics()["requests"] - before == 1
    finally:
        server.close()


async def _scripted(answers: list[tuple[int, dict, dict[str, str]]], retries: int = 3):
    """Drive one request through the client against a server answering from ``answers``; returns
    the outcome (result or exception) and how many requests the server saw."""
    seen = []

    async def chat(request: web.Request) -> web.Response:
        seen.append(await request.json())
        status, body, headers = answers.pop(0)
        return web.json_response(body, status=status, headers=headers)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text="vllm:num_requests_running 0\n")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    endpoint = OpenAIEndpoint.Config(base_url=f"http://127.0.0.1:{runner.addresses[0][1]}", model="m", api="vlrl").build()
    client = InferenceClient([endpoint], InferenceClient.Config(backoff_s=0, retries=retries))
    try:
        outcome = await client.generate("t", PROMPT, [], GREEDY, request_id="r0")
    except Exception as error:
        outcome = error
    finally:
        await endpoint.close()
        await runner.cleanup()
    return outcome, len(seen)


def test_an_http_500_is_an_engine_error_and_not_retried():
    failed = {"error": {"message": "internal server error; see the server log", "code": 500}}
    outcome, requests = asyncio.run(_scripted([(500, failed, {})] * 4))
    assert isinstance(outcome, EngineError) and "HTTP 500: internal server error" in str(outcome)
    assert requests == 1


def test_a_server_saying_try_later_is_retried():
    busy = {"error": {"message": "busy"}}
    answers = [(503, busy, {}), (500, busy, {"Retry-After": "0"}), (429, busy, {}), (200, completion(PROMPT), {})]
    outcome, requests = asyncio.run(_scripted(answers))
    assert outcome.token_ids.tolist() == [5, 2]
    assert requests == 4


class AlwaysMissing:
    """A replica that keeps answering every image missing, pixels sent or not."""

    name = "forgetful"

    def __init__(self) -> None:
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest):
        self.requests.append(request)
        return CacheMiss(request.request_id, tuple(dict.fromkeys(p.content_hash for p in request.images)))

    async def load(self) -> int:
        return 0

    async def forget(self, trajectory_id: str) -> None:
        pass


def test_a_replica_that_keeps_missing_costs_at_most_the_resend_bound():
    rng = np.random.default_rng(0)
    screens = [ContextImage.of(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)) for _ in range(2)]
    replica = AlwaysMissing()
    client = InferenceClient([replica], InferenceClient.Config(backoff_s=0, retries=3))
    expected = r"forgetful still misses 2 image\(s\) after 2 resend\(s\), the last with every image"
    with pytest.raises(InferenceError, match=expected):
        asyncio.run(client.generate("t", PROMPT, screens, GREEDY, request_id="r0"))
    assert len(replica.requests) == 1 + InferenceClient.Config().max_resends == 3
    assert all(part.pixels is not None for part in replica.requests[-1].images)
