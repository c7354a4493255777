"""An engine replica behind an OpenAI-compatible HTTP server, seen as an ``Endpoint``.

One ``GenerateRequest`` becomes one POST, in one of two token-in dialects (``Config.api``):

- ``vlrl serve``: ``/v1/chat/completions`` with the prompt as ``prompt_token_ids``, each image as
  an ``image_url`` part in prompt order whose ``uuid`` is its content hash, with a lossless
  PNG/WebP data URL when the request carries pixels and ``"image_url": null`` when the client's
  tracker says the server holds it (the wire format is documented in ``vlrl.rollout.server``);
- ``vllm serve --enable-scale-out``: vLLM's own token-in route ``/inference/v1/generate``, with
  ``token_ids`` (each image's pad run collapsed to one pad, which vLLM expands again by the
  checkpoint's rule), the images as ``content_parts`` with the same uuids and data URLs (a null
  URL for a held one), and vLLM's ``SamplingParams``. The expanded prompt it echoes must be
  exactly the ids sent.

Answers map onto the client's contract:

- 400 naming missing images -> ``CacheMiss`` (``missing_uuids``, or vLLM's "Cache miss for image
  at index i but data is not provided." mapped back through the request's images; vLLM names only
  the first missing image, and the client's resend loop ships every image after two misses);
- a connection refused or not made in time -> ``EndpointUnavailable``;
- what the server says is worth retrying -> ``TransientEndpointError``: 429, 503 and a proxy's
  502 or 504 (a replica behind it restarting), any 5xx with ``Retry-After``, and timeouts and
  connections dropped mid-request (the client's retry then finds out whether the server is gone);
- any other 4xx -> ``BadRequestError`` (the request's fault: ``vlrl serve`` answers the engine's
  admission errors with 400), never retried;
- any other 5xx -> ``EngineError``: ``vlrl serve``'s 500 is an unexpected engine failure, which
  the same request would meet again, so it is not retried either.

``load()`` reads Prometheus ``/metrics`` and sums vLLM's ``vllm:num_requests_running`` and
``vllm:num_requests_waiting`` over all label sets (``vlrl serve`` exports the same gauges).
``forget()`` does nothing: over HTTP there is no per-trajectory state to free (``vlrl serve``
bounds its KV prefixes by LRU; vLLM's prefix cache is content-addressed).

vLLM's chat endpoint ignores ``prompt_token_ids`` and templates the messages itself, which is why
a vLLM server is spoken to through its generate route. Either way the answer's prompt ids are
checked against the ids sent, and a server that did not use them is reported as such, never
trusted. ``api='auto'`` picks the dialect from ``/v1/models`` (vLLM lists its models as owned by
"vllm").
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import aiohttp
import numpy as np

from vlrl.config import Gt, NonEmpty
from vlrl.mm import encode_image
from vlrl.rollout.client import BadRequestError, EndpointUnavailable, EngineError, TransientEndpointError
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, ImagePart

_VLLM_MISS = re.compile(r"Cache miss for image at index (\d+)")
_LOAD_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
_TRY_LATER = (429, 502, 503, 504)
"""Statuses that say "try again later" (HTTP's overload and gateway answers)."""


class OpenAIEndpoint:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """An inference replica reached over HTTP (`vlrl serve`, or a server speaking its dialect)."""

        base_url: Annotated[str, NonEmpty()]
        """The server's root, e.g. 'http://127.0.0.1:8000' (a trailing '/v1' is accepted)."""

        model: str | None = None
        """Model id to request (None: the first one /v1/models lists)."""

        api_key: str | None = None
        """Sent as 'Authorization: Bearer <api_key>' when set."""

        image_format: Literal["png", "webp"] = "png"
        """Lossless encoding of shipped pixels: PNG (fast) or lossless WebP (smaller, slower)."""

        request_timeout_s: Annotated[float, Gt(0)] = 600.0
        """A request answered later counts as a transient failure."""

        connect_timeout_s: Annotated[float, Gt(0)] = 10.0
        """Connecting for longer means the server is unavailable."""

        max_connections: Annotated[int, Gt(0)] = 256
        """Concurrent connections to the server (requests beyond wait for one)."""

        api: Literal["auto", "vlrl", "vllm"] = "auto"
        """Token-in dialect: 'vlrl' (``vlrl serve``'s chat extension), 'vllm' (``vllm serve
        --enable-scale-out``'s ``/inference/v1/generate``), or 'auto' (from ``/v1/models``)."""

        name: str | None = None
        """Name in error messages and stats (None: base_url)."""

        def build(self, *, image_token_id: int | None = None) -> OpenAIEndpoint:
            """``image_token_id``: the checkpoint's ``<|image_pad|>`` id, which the 'vllm' dialect
            needs to collapse each image's pad run (the Agent Loop's host passes its processor's)."""
            return OpenAIEndpoint(self, image_token_id=image_token_id)

    takes_tiles = False
    """The OpenAI API takes whole images (each with its uuid, so a held one is not sent again)."""

    def __init__(self, config: OpenAIEndpoint.Config, *, image_token_id: int | None = None) -> None:
        self._config = config
        self._image_token_id = image_token_id
        self._api = None if config.api == "auto" else config.api
        self._root = config.base_url.rstrip("/").removesuffix("/v1")
        self.name = config.name or self._root
        self._headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._model = config.model
        self._session: aiohttp.ClientSession | None = None

    async def generate(self, request: GenerateRequest) -> GenerateResult | CacheMiss:
        if (self._api or await self._dialect()) == "vllm":
            return await self._generate_vllm(request)
        parts = await asyncio.gather(*(self._image_part(part) for part in request.images))
        sampling = request.sampling
        body = {
            "model": self._model or await self._first_model(),
            "messages": [{"role": "user", "content": parts}],
            "prompt_token_ids": request.prompt_ids.tolist(),
            "request_id": request.request_id,
            "trajectory_id": request.trajectory_id,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "seed": sampling.seed,
            "stop_token_ids": list(sampling.stop_token_ids),
            "logprobs": True,
            "return_token_ids": True,
        }
        answer = await self._post(request, "/v1/chat/completions", body)
        return answer if isinstance(answer, CacheMiss) else self._result(request, answer)

    async def load(self) -> int:
        status, text, later = await self._call("GET", "/metrics", None, parse=False)
        if status != 200:
            raise _status_error(self.name, status, text, later)
        metrics = parse_metrics(text)
        return int(sum(metrics.get(gauge, 0.0) for gauge in _LOAD_GAUGES))

    async def forget(self, trajectory_id: str) -> None:
        """Nothing to free over HTTP (see the module docstring)."""

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _image_part(self, part: ImagePart) -> dict[str, Any]:
        if part.pixels is None:
            return {"type": "image_url", "image_url": None, "uuid": part.content_hash}
        url = await asyncio.to_thread(_data_url, part.pixels, self._config.image_format)
        return {"type": "image_url", "image_url": {"url": url}, "uuid": part.content_hash}

    async def _generate_vllm(self, request: GenerateRequest) -> GenerateResult | CacheMiss:
        """One request through vLLM's ``/inference/v1/generate`` (see the module docstring)."""
        if self._image_token_id is None and request.images:
            raise ValueError(
                f"{self.name}: vLLM's generate route needs the checkpoint's image_token_id to collapse the image pads;"
                " build the endpoint with OpenAIEndpoint.Config.build(image_token_id=...)"
            )
        sampling = request.sampling
        ids = request.prompt_ids if not request.images else collapse_pads(request.prompt_ids, self._image_token_id)
        parts = await asyncio.gather(*(self._image_part(part) for part in request.images))
        body = {
            "model": self._model or await self._first_model(),
            "request_id": request.request_id,
            "token_ids": ids.tolist(),
            "content_parts": [{"type": "image_url", "url": (p["image_url"] or {}).get("url"), "uuid": p["uuid"]} for p in parts],
            "sampling_params": {
                "max_tokens": sampling.max_tokens,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "seed": sampling.seed,
                "stop_token_ids": list(sampling.stop_token_ids),
                "logprobs": 0,
            },
            "return_token_ids": True,
        }
        answer = await self._post(request, "/inference/v1/generate", body)
        if isinstance(answer, CacheMiss):
            return answer
        try:
            choice = answer["choices"][0]
            reply = {
                "choices": [{
                    "token_ids": choice["token_ids"],
                    "logprobs": {"content": choice["logprobs"]["content"]},
                    "finish_reason": choice["finish_reason"],
                }],
                "prompt_token_ids": answer["prompt_token_ids"],
                "usage": answer["usage"],
            }  # fmt: skip
        except (KeyError, IndexError, TypeError) as error:
            raise ValueError(f"{self.name}: answer lacks {error!r}; is it vLLM's generate route?") from None
        return self._result(request, reply)

    async def _post(self, request: GenerateRequest, path: str, body: dict[str, Any]) -> dict[str, Any] | CacheMiss:
        """POST ``body`` (serialised off the event loop when it carries pixels); a 400 naming
        missing images is a ``CacheMiss``, any other status but 200 the client's error class."""
        data = await asyncio.to_thread(json.dumps, body) if request.image_bytes else json.dumps(body)
        status, answer, later = await self._call("POST", path, data)
        if status == 400:
            missing = missing_images(answer, [part.content_hash for part in request.images])
            if missing:
                return CacheMiss(request.request_id, missing)
        if status != 200:
            raise _status_error(self.name, status, answer, later)
        return answer

    async def _dialect(self) -> str:
        """'vllm' when ``/v1/models`` lists vLLM as the model's owner, else 'vlrl' (``Config.api='auto'``)."""
        listed = await self._models()
        self._api = "vllm" if any(entry.get("owned_by") == "vllm" for entry in listed) else "vlrl"
        return self._api

    async def _first_model(self) -> str:
        self._model = (await self._models())[0]["id"]
        return self._model

    async def _models(self) -> list[dict[str, Any]]:
        status, answer, later = await self._call("GET", "/v1/models", None)
        if status != 200 or not answer.get("data"):
            raise _status_error(self.name, status, answer, later)
        return answer["data"]

    async def _call(self, method: str, path: str, data: str | None, *, parse: bool = True) -> tuple[int, Any, bool]:
        """The status, the answer (parsed unless ``parse`` is False) and whether it asks for a retry
        (``Retry-After``)."""
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=self._config.request_timeout_s, connect=self._config.connect_timeout_s)
            connector = aiohttp.TCPConnector(limit=self._config.max_connections)
            self._session = aiohttp.ClientSession(timeout=timeout, connector=connector, headers=self._headers)
        headers = {"Content-Type": "application/json"} if data is not None else None
        try:
            async with self._session.request(method, self._root + path, data=data, headers=headers) as response:
                text = await response.text()
                status = response.status
                later = "Retry-After" in response.headers
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as error:
            raise EndpointUnavailable(f"{self.name}: cannot connect: {error}") from error
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            # A reset or a timeout mid-request says little; a retry that cannot connect says it is gone.
            raise TransientEndpointError(f"{self.name}: {path}: {type(error).__name__}: {error}") from error
        if not parse:
            return status, text, later
        try:
            return status, json.loads(text), later
        except ValueError:
            return status, {"error": {"message": text[:500]}}, later

    def _result(self, request: GenerateRequest, answer: dict) -> GenerateResult:
        try:
            choice = answer["choices"][0]
            token_ids = np.asarray(choice["token_ids"], dtype=np.int32)
            logprobs = np.asarray([entry["logprob"] for entry in choice["logprobs"]["content"]], dtype=np.float32)
            echoed = answer["prompt_token_ids"]
            finish = choice["finish_reason"]
            usage = answer["usage"]
            cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
            prompt_tokens = int(usage["prompt_tokens"])
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise ValueError(f"{self.name}: answer lacks {error!r}; is it an OpenAI-compatible server?") from None
        if echoed != request.prompt_ids.tolist():
            raise ValueError(
                f"{self.name}: the server did not run the prompt_token_ids sent ({len(echoed)} prompt tokens"
                f" echoed, {len(request.prompt_ids)} sent); token-in needs vlrl serve's extension"
            )
        if finish not in ("stop", "length"):
            raise TransientEndpointError(f"{self.name}: request {request.request_id} ended with {finish!r}")
        if len(logprobs) != len(token_ids):
            raise ValueError(f"{self.name}: {len(token_ids)} token ids but {len(logprobs)} logprobs")
        return GenerateResult(
            request_id=request.request_id,
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=finish,
            policy_version=int(answer.get("policy_version", 0)),
            prefill_tokens=prompt_tokens - cached,
            reused_prefix_tokens=cached,
        )


def collapse_pads(ids: np.ndarray, pad: int) -> np.ndarray:
    """``ids`` with every run of ``pad`` cut to one: a token prompt as vLLM takes it (it expands
    each image's pad again, by the checkpoint's rule)."""
    run_tail = (ids[1:] == pad) & (ids[:-1] == pad)  # (T - 1,) a pad right after a pad
    return ids[np.concatenate([[True], ~run_tail])]


def missing_images(answer: Any, uuids: list[str]) -> tuple[str, ...]:
    """The uuids a 400 answer reports missing (``uuids``: the request's image uuids in order)."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict):
        return ()
    named = error.get("missing_uuids")
    if isinstance(named, list):
        return tuple(dict.fromkeys(str(u) for u in named))
    indices = [int(i) for i in _VLLM_MISS.findall(str(error.get("message", "")))]
    return tuple(dict.fromkeys(uuids[i] for i in indices if i < len(uuids)))


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {metric name: value summed over its label sets}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_and_labels, _, rest = line.rpartition("}") if "}" in line else line.partition(" ")
        name = name_and_labels.partition("{")[0].strip()
        try:
            value = float(rest.split()[0])
        except (IndexError, ValueError):
            continue
        out[name] = out.get(name, 0.0) + value
    return out


def _data_url(pixels: np.ndarray, image_format: str) -> str:
    encoded = encode_image(pixels, image_format, lossless=image_format == "webp")
    return f"data:image/{image_format};base64,{base64.b64encode(encoded).decode('ascii')}"


def _status_error(name: str, status: int, answer: Any, later: bool) -> Exception:
    """The client's class for a non-200 answer (``later``: it carried ``Retry-After``)."""
    error = answer.get("error") if isinstance(answer, dict) else None
    message = error.get("message") if isinstance(error, dict) else error or str(answer)[:500]
    text = f"{name}: HTTP {status}: {message}"
    if status in _TRY_LATER or (status >= 500 and later):
        return TransientEndpointError(text)
    if status >= 500:
        return EngineError(text)
    return BadRequestError(text)
