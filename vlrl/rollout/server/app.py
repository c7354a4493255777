"""``OpenAIServer``: the embedded engine behind an OpenAI-compatible HTTP API (aiohttp).

The ``EngineCore`` runs in the server's own process and event loop, not as a Ray actor: the core
is asyncio-native (requests wait as coroutines, the model runs on its compute thread), so the
HTTP handlers await it directly, ``vlrl serve --model PATH`` needs no Ray cluster, and images go
from the request body to the engine without another serialisation hop.

Routes: ``GET /v1/models``, ``POST /v1/chat/completions`` (non-streaming), ``GET /health`` and
``GET /metrics`` (Prometheus text: vLLM's ``vllm:num_requests_running`` / ``_waiting`` gauges,
so one client reads the load of either server, plus every ``vlrl:`` counter). With an API key,
every ``/v1/`` route wants ``Authorization: Bearer KEY`` (health and metrics stay open, as in
vLLM). Errors come in OpenAI's shape with the HTTP status as ``code``; a reference to an image
the server no longer holds is a 400 (see ``vlrl.rollout.server`` for the wire format).

Hostile or broken requests are refused with a 4xx, never a 500, and cost the server a bounded
amount: a body over ``max_request_mb`` (413); more requests than one engine batch plus
``max_queued`` (429 with Retry-After, before the body is read); malformed, non-UTF-8 or too deeply
nested JSON, and any field out of range (400, before images are decoded); images over the
per-request count and pixel caps, or of a shape the processor refuses (400, read from their
headers before decoding); a prompt plus max_tokens beyond ``max_model_len`` (400). Parsing and
tokenizing run off the event loop, so a large body never stalls other requests; a client that
disconnects cancels its request, queued or running.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import signal
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

import numpy as np
from aiohttp import web
from transformers import AutoConfig, AutoProcessor

from vlrl.config import ConfigError, Ge, Gt, Le, NonEmpty
from vlrl.mm import patch_rule_of
from vlrl.models import ModelFamilyError, family_of
from vlrl.rollout.engine import EmbeddedEngine, EngineCore
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, ImagePart, SamplingParams
from vlrl.rollout.server.media import ImageResolver
from vlrl.rollout.server.prompt import ChatTemplate
from vlrl.rollout.server.wire import ApiError, ChatRequest, ImageInput, load_json, parse_chat_request

_RETRY_AFTER_S = 1
"""Seconds a 429 asks the client to wait before retrying (the openai client honours Retry-After)."""

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Counters:
    requests: int = 0
    errors: int = 0
    cache_miss_replies: int = 0
    busy_replies: int = 0
    request_bytes: int = 0
    """Bytes of the chat request bodies read (JSON with base64 images; after any Content-Encoding)."""


class OpenAIServer:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """`vlrl serve`: one in-process engine replica behind an OpenAI-compatible HTTP API."""

        model_path: Annotated[str, NonEmpty()]
        """Local folder of the checkpoint served (any family of ``vlrl.models``) (model and processor, as
        ``save_pretrained`` writes them): ``vlrl serve --model PATH``."""

        engine: EmbeddedEngine.Config = field(default_factory=EmbeddedEngine.Config)
        """The engine serving ``model_path`` (its Ray-only fields, cpus, gpus and max_concurrency,
        are unused here)."""

        host: Annotated[str, NonEmpty()] = "127.0.0.1"
        """Address to listen on; loopback by default, so nothing off the machine can reach it."""

        port: Annotated[int, Ge(0), Le(65535)] = 8000
        """Port to listen on (0: any free port)."""

        api_key: str | None = None
        """When set, every /v1/ request must send 'Authorization: Bearer <api_key>'."""

        served_model_name: str | None = None
        """The model id clients send and /v1/models lists (None: the model path)."""

        max_request_mb: Annotated[float, Gt(0)] = 64.0
        """Largest request body, and largest fetched image, in MiB."""

        max_image_pixels: Annotated[int, Ge(1)] = 4096 * 4096
        """Largest image (width x height) decoded; larger ones are refused from their header."""

        max_images: Annotated[int, Ge(1)] = 256
        """Image parts, sent or referenced by uuid, one request may hold."""

        max_request_pixels: Annotated[int, Ge(1)] = 2 * 4096 * 4096
        """Pixels (width x height) the distinct images one request sends may hold in all, read from
        their headers before any is decoded. Decoded pixels live until the answer, so the server holds
        at most about (engine.max_batch + max_queued) x 3 bytes x this."""

        max_queued: Annotated[int, Ge(0)] = 64
        """Chat requests held beyond one full engine batch (reading, decoding, waiting for a batch);
        more are answered 429 with Retry-After before their body is read."""

        remote_image_hosts: tuple[str, ...] = ()
        """Hosts whose http(s) image URLs may be fetched; empty refuses every remote URL."""

        max_uuids: Annotated[int, Ge(1)] = 65536
        """Image uuids remembered for reuse by reference (least recently used forgotten)."""

        default_max_tokens: Annotated[int, Ge(1)] = 256
        """Tokens generated when a request sets neither max_tokens nor max_completion_tokens."""

        max_model_len: Annotated[int, Ge(1)] | None = None
        """Longest prompt plus max_tokens accepted (None: the model's max_position_embeddings, also the
        most it may be)."""

        def check(self) -> None:
            if self.api_key == "":
                raise ConfigError("api_key", self.api_key, "None or a non-empty key")
            try:  # an unsupported checkpoint fails here, naming its model_type, not inside from_pretrained
                family_of(self.model_path)
            except ModelFamilyError as error:
                raise ConfigError(
                    "model_path", self.model_path, "a checkpoint folder of a supported model family", hint=str(error)
                ) from None
            positions = _text_config(self.model_path).max_position_embeddings
            if self.max_model_len is not None and self.max_model_len > positions:
                raise ConfigError(
                    "max_model_len", self.max_model_len, f"at most the model's max_position_embeddings, {positions}"
                )

        def build(self) -> OpenAIServer:
            return OpenAIServer(self)

    def __init__(self, config: OpenAIServer.Config) -> None:
        self._config = config
        self.model_name = config.served_model_name or config.model_path
        processor = AutoProcessor.from_pretrained(config.model_path)
        self._template = ChatTemplate(processor)
        text_config = _text_config(config.model_path)
        self._max_model_len = config.max_model_len or text_config.max_position_embeddings
        self._vocab_size = text_config.vocab_size
        self._max_bytes = int(config.max_request_mb * 2**20)
        self._max_held = config.engine.max_batch + config.max_queued
        self._core = EngineCore(config.engine, config.model_path)
        self._images = ImageResolver(
            rule=patch_rule_of(processor),
            max_images=config.max_images,
            max_pixels=config.max_image_pixels,
            max_request_pixels=config.max_request_pixels,
            max_bytes=self._max_bytes,
            remote_hosts=config.remote_image_hosts,
            max_uuids=config.max_uuids,
        )
        # One thread of its own: prompts are built off the event loop, one at a time (the tokenizer's
        # truncation and padding state is shared).
        self._tokenizing = ThreadPoolExecutor(1, thread_name_prefix="serve-tokenize")
        self._counts = _Counters()
        self._held = 0
        self._decoding = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        """Listen; return the base URL (``http://host:port``, the port resolved when 0 was asked)."""
        app = web.Application(client_max_size=self._max_bytes, middlewares=[self._errors, self._auth])
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._config.host, self._config.port).start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        await self._images.close()
        await self._core.close()
        self._tokenizing.shutdown(wait=True)

    def run(self) -> None:
        """Serve until SIGINT or SIGTERM."""
        asyncio.run(self._serve_until_signalled())

    def stats(self) -> dict[str, float]:
        """Server counters, then the engine's as ``engine_*``."""
        c, media = self._counts, self._images.stats
        out: dict[str, float] = {
            "requests": c.requests,
            "errors": c.errors,
            "cache_miss_replies": c.cache_miss_replies,
            "busy_replies": c.busy_replies,
            "request_bytes_received": c.request_bytes,
            "images_received": media.images_received,
            "image_bytes_received": media.image_bytes_received,
            "images_decoded": media.images_decoded,
            "images_referenced": media.images_referenced,
            "remote_images_fetched": media.remote_images_fetched,
        }
        return out | {f"engine_{k}": v for k, v in self._core.stats().items()}

    def start_line(self, url: str) -> str:
        """What ``vlrl serve`` prints once it listens: where, and the model name requests must send."""
        return (
            f"vlrl serve: {self.model_name} at {url}/v1 (requests send model={self.model_name!r};"
            " --served-model-name sets it; SIGINT or SIGTERM stops it)"
        )

    async def _serve_until_signalled(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        url = await self.start()
        if self._config.api_key is None and self._config.host not in ("127.0.0.1", "localhost", "::1"):
            print(f"warning: serving on {self._config.host} without an API key", file=sys.stderr)
        print(self.start_line(url), flush=True)
        try:
            await stop.wait()
        finally:
            await self.stop()

    # -- middlewares

    @web.middleware
    async def _errors(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as error:
            self._counts.errors += 1
            return web.json_response(error.body(), status=error.status, headers=error.headers)
        except web.RequestPayloadError:  # a body aiohttp cannot read: bad chunking, corrupt gzip
            self._counts.errors += 1
            error = ApiError("the request body cannot be read (corrupt for its Content-Encoding or Transfer-Encoding)")
            return web.json_response(error.body(), status=400)
        except web.HTTPException as error:  # routing (404, 405) and body size (413)
            self._counts.errors += 1
            message = error.reason
            if error.status == 413:
                message = f"request body larger than {self._config.max_request_mb:g} MiB (the server's --max-request-mb)"
            return web.json_response(ApiError(message, status=error.status).body(), status=error.status)
        except Exception:
            self._counts.errors += 1
            log.exception("%s %s failed", request.method, request.path)
            error = ApiError("internal server error; see the server log", status=500)
            return web.json_response(error.body(), status=500)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        key = self._config.api_key
        if key is not None and request.path.startswith("/v1/"):
            sent = request.headers.get("Authorization", "")  # aiohttp keeps non-UTF-8 bytes as surrogates
            if not hmac.compare_digest(sent.encode(errors="surrogateescape"), f"Bearer {key}".encode()):
                raise ApiError("invalid or missing API key; send 'Authorization: Bearer <key>'", status=401)
        return await handler(request)

    # -- routes

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def _models(self, request: web.Request) -> web.Response:
        model = {
            "id": self.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "vlrl",
            "root": self._config.model_path,
            "max_model_len": self._max_model_len,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def _metrics(self, request: web.Request) -> web.Response:
        """Running: requests the engine holds (queued for a batch or in one); waiting: images still decoding."""
        label = '{model_name="%s"}' % self.model_name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{label} {self._core.load()}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{label} {self._decoding}",
        ]
        lines += [f"vlrl:{name}{label} {value}" for name, value in self.stats().items()]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _chat(self, request: web.Request) -> web.Response:
        self._counts.requests += 1
        if self._held >= self._max_held:
            self._counts.busy_replies += 1
            raise ApiError(
                f"the server is busy: it holds {self._held} requests, one engine batch"
                f" ({self._config.engine.max_batch}) plus --max-queued ({self._config.max_queued});"
                f" retry in {_RETRY_AFTER_S} s",
                status=429,
                headers={"Retry-After": str(_RETRY_AFTER_S)},
            )
        self._held += 1
        try:
            return await self._answer(request)
        finally:
            self._held -= 1

    async def _answer(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self._counts.request_bytes += len(raw)
        chat = await asyncio.to_thread(self._parse, raw)
        if chat.model is not None and chat.model != self.model_name:
            raise ApiError(
                f"The model `{chat.model}` does not exist. This server serves `{self.model_name}`: send"
                f" model={self.model_name!r}, or start vlrl serve with --served-model-name {chat.model}",
                param="model",
                status=404,
            )
        self._decoding += 1
        try:
            parts, missing = await self._images.resolve(chat.images, unknown_as_hash=chat.prompt_token_ids is not None)
        finally:
            self._decoding -= 1
        if missing:
            raise self._miss(chat.images, missing)
        loop = asyncio.get_running_loop()
        prompt, sampling = await loop.run_in_executor(self._tokenizing, self._prompt, chat, parts)
        request_id = chat.request_id or uuid.uuid4().hex
        trajectory = chat.trajectory_id or f"request:{request_id}"
        try:
            answer = await self._core.generate(GenerateRequest(request_id, trajectory, prompt, tuple(parts), sampling))
        except ValueError as error:  # the engine's admission checks: ids out of vocabulary, image pad runs
            raise ApiError(str(error), param="prompt_token_ids" if chat.prompt_token_ids is not None else "messages")
        finally:
            if chat.trajectory_id is None:  # a one-off request: keep no KV prefix for it
                self._core.forget(trajectory)
        if isinstance(answer, CacheMiss):
            lost = set(answer.missing)
            raise self._miss(chat.images, [i for i, p in enumerate(parts) if p.pixels is None and p.content_hash in lost])
        return web.json_response(self._completion(chat, request_id, prompt, answer))

    def _parse(self, raw: bytes) -> ChatRequest:
        """The body checked as far as it can be without its images (blocking: runs on a thread)."""
        chat = parse_chat_request(load_json(raw), default_max_tokens=self._config.default_max_tokens)
        unknown = [i for i in chat.sampling.stop_token_ids if i >= self._vocab_size]
        if unknown:
            raise ApiError(
                f"stop_token_ids: {unknown[0]} is no token id; expected 0 <= id < vocab_size={self._vocab_size}",
                param="stop_token_ids",
            )
        if chat.prompt_token_ids is not None:  # token-in: refused before any image is decoded
            self._check_context(len(chat.prompt_token_ids), chat.sampling.max_tokens)
        return chat

    def _prompt(self, chat: ChatRequest, parts: list[ImagePart]) -> tuple[np.ndarray, SamplingParams]:
        """The prompt ids, and the sampling with stop strings as ids (blocking: tokenizes)."""
        prompt = chat.prompt_token_ids
        if prompt is None:
            prompt = self._template.prompt_ids(chat.messages, [(p.width, p.height) for p in parts])
        stops = self._template.stop_token_ids(chat.stop, param="stop")
        sampling = replace(chat.sampling, stop_token_ids=chat.sampling.stop_token_ids + stops)
        self._check_context(len(prompt), sampling.max_tokens)
        return prompt, sampling

    def _check_context(self, prompt_tokens: int, max_tokens: int) -> None:
        if prompt_tokens + max_tokens > self._max_model_len:
            raise ApiError(
                f"max_tokens: the prompt's {prompt_tokens} tokens plus max_tokens={max_tokens} exceed the"
                f" model's context of {self._max_model_len} tokens (the server's --max-model-len)",
                param="max_tokens",
            )

    def _miss(self, images: tuple[ImageInput, ...], indices: list[int]) -> ApiError:
        """vLLM's message for each missing image, plus the uuids as a field a client can read."""
        self._counts.cache_miss_replies += 1
        message = " ".join(
            f"Cache miss for image at index {i} but data is not provided (uuid {images[i].uuid!r})." for i in indices
        )
        uuids = list(dict.fromkeys(images[i].uuid for i in indices))
        return ApiError(f"{message} Resend those images with their image_url.", param="messages", missing_uuids=uuids)

    def _completion(self, chat: ChatRequest, request_id: str, prompt: np.ndarray, result: GenerateResult) -> dict:
        ids = result.token_ids.tolist()
        shown = ids[:-1] if result.finish_reason == "stop" else ids  # the stop token is not part of the text
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": self._template.text(shown)},
            "finish_reason": result.finish_reason,
            "logprobs": None,
        }
        if chat.logprobs:
            pieces = self._template.pieces(ids)
            choice["logprobs"] = {
                "content": [
                    {"token": piece, "logprob": logprob, "bytes": list(piece.encode()), "top_logprobs": []}
                    for piece, logprob in zip(pieces, result.logprobs.tolist())
                ]
            }
        if chat.return_token_ids:
            choice["token_ids"] = ids
        body: dict[str, Any] = {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt) + len(ids),
                "prompt_tokens_details": {"cached_tokens": result.reused_prefix_tokens},
            },
            "policy_version": result.policy_version,
        }
        if chat.return_token_ids:
            body["prompt_token_ids"] = prompt.tolist()
        return body


def _text_config(model_path: str) -> Any:
    """The language model's config: where context length and vocabulary size live in every family."""
    return AutoConfig.from_pretrained(model_path).get_text_config()
