"""The JSON body of ``POST /v1/chat/completions``, checked field by field into a ``ChatRequest``.

Accepted (anything else is refused with a 400 that names the field, so no sampling option a
client relies on is silently dropped):

- OpenAI: ``model``, ``messages``, ``temperature``, ``top_p``, ``max_tokens`` /
  ``max_completion_tokens``, ``stop``, ``seed``, ``logprobs``, ``top_logprobs`` (0 only),
  ``n`` (1 only), ``stream`` (false only), ``user`` (ignored).
- vLLM extensions: ``stop_token_ids``, ``return_token_ids``, ``request_id``, and per image part a
  ``uuid``; ``"image_url": null`` with a ``uuid`` references an image sent before.
- vlrl extensions: ``prompt_token_ids`` (token-in: the ids are the whole prompt; the messages then
  carry only the images, in prompt order) and ``trajectory_id`` (turns of one trajectory reuse
  its cached KV prefix).

Every sampling value is checked here, before the request can join a batch: one request's value
that made the batch's draw raise (a seed torch cannot take, a denormal temperature whose
``logits / temperature`` overflows) would fail every request sampled with it. Temperature is 0
(greedy) or in [``MIN_TEMPERATURE``, 2]; seeds are integers in [0, 2**63).
"""

from __future__ import annotations

import json
import math
import reprlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlrl.rollout.engine.sampling import MIN_TEMPERATURE, SEED_LIMIT
from vlrl.rollout.protocol import SamplingParams

_ROLES = ("system", "user", "assistant")
_FIELDS = frozenset(
    {
        "model", "messages", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop",
        "seed", "logprobs", "top_logprobs", "n", "stream", "user", "stop_token_ids", "return_token_ids",
        "request_id", "prompt_token_ids", "trajectory_id",
    }
)  # fmt: skip

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects accepted; a chat body needs 6 (the body, messages, a
message, its content, a part, its image_url)."""


class ApiError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    TYPES = {
        400: "BadRequestError",
        401: "AuthenticationError",
        404: "NotFoundError",
        405: "MethodNotAllowedError",
        413: "RequestTooLargeError",
        429: "RateLimitError",
        500: "InternalServerError",
    }

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        """``extra`` fields join the error object; ``headers`` go on the HTTP answer."""
        super().__init__(message)
        self.status = status
        self.param = param
        self.headers = headers
        self.extra = extra

    def body(self) -> dict[str, Any]:
        kind = self.TYPES.get(self.status, "BadRequestError" if self.status < 500 else "InternalServerError")
        error = {"message": str(self), "type": kind, "param": self.param, "code": self.status}
        return {"error": {**error, **self.extra}}


@dataclass(frozen=True, slots=True)
class ImageInput:
    """One ``image_url`` content part: bytes to fetch or decode, or a bare reference by ``uuid``."""

    where: str
    """The part's path in the body, for error messages: ``messages[1].content[0]``."""
    url: str | None
    uuid: str | None


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: tuple[str | ImageInput, ...]
    """Text pieces and images, in order."""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str | None
    messages: tuple[ChatMessage, ...]
    prompt_token_ids: np.ndarray | None
    """Token-in: int32 ids of the whole prompt, image pads expanded; None to apply the chat template."""
    sampling: SamplingParams
    """Sampling as sent; ``stop`` strings are resolved to ids separately (they need the tokenizer)."""
    stop: tuple[str, ...]
    logprobs: bool
    return_token_ids: bool
    request_id: str | None
    trajectory_id: str | None

    @property
    def images(self) -> tuple[ImageInput, ...]:
        return tuple(p for m in self.messages for p in m.content if isinstance(p, ImageInput))


def load_json(raw: bytes) -> Any:
    """The body's JSON value (blocking: call it off the event loop); malformed, non-UTF-8 or too
    deeply nested JSON is a 400."""
    try:
        value = json.loads(raw)
        too_deep = _too_deep(value)
    except RecursionError:  # nested past the interpreter's recursion limit, so past ours
        too_deep = True
    except ValueError as error:  # UnicodeDecodeError included
        raise ApiError(f"the request body is not valid JSON ({error})") from None
    if too_deep:
        raise ApiError(f"the request body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels")
    return value


def parse_chat_request(body: Any, *, default_max_tokens: int) -> ChatRequest:
    if not isinstance(body, dict):
        raise ApiError(f"the request body is {_kind(body)}; expected a JSON object")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise ApiError(
            f"unsupported field {unknown[0]!r}; vlrl serve accepts {', '.join(sorted(_FIELDS))}", param=unknown[0]
        )
    if body.get("stream") not in (None, False):
        raise ApiError("stream: only non-streaming completions are served; send stream=false", param="stream")
    if body.get("n") not in (None, 1):
        raise ApiError(f"n: {reprlib.repr(body['n'])}; only n=1 is served", param="n")
    if body.get("top_logprobs") not in (None, 0):
        raise ApiError("top_logprobs: only the sampled token's logprob is returned; send 0", param="top_logprobs")
    prompt_ids = _token_ids(body, "prompt_token_ids")
    token_in = prompt_ids is not None
    if token_in and len(prompt_ids) == 0:
        raise ApiError("prompt_token_ids: empty; expected the prompt's token ids", param="prompt_token_ids")
    messages = _messages(body.get("messages"), token_in=token_in)
    max_tokens = _get(body, "max_completion_tokens", int, lo=1)
    if max_tokens is None:
        max_tokens = _get(body, "max_tokens", int, lo=1, default=default_max_tokens)
    stop = body.get("stop")
    stop = [stop] if isinstance(stop, str) else stop
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)):
        raise ApiError("stop: expected a non-empty string or a list of them", param="stop")
    for text in stop or ():
        _check_unicode(text, "stop")
    stop_ids = _token_ids(body, "stop_token_ids")
    temperature = _get(body, "temperature", float, lo=0, hi=2, default=1.0)
    if 0 < temperature < MIN_TEMPERATURE:
        raise ApiError(
            f"temperature: {temperature!r}; expected 0 (greedy) or a number in [{MIN_TEMPERATURE:g}, 2]",
            param="temperature",
        )
    sampling = SamplingParams(
        temperature=temperature,
        top_p=_get(body, "top_p", float, lo=0, hi=1, default=1.0, open_lo=True),
        max_tokens=max_tokens,
        stop_token_ids=() if stop_ids is None else tuple(int(i) for i in stop_ids),
        seed=_get(body, "seed", int, lo=0, hi=SEED_LIMIT - 1),
    )
    return ChatRequest(
        model=_get(body, "model", str),
        messages=messages,
        prompt_token_ids=prompt_ids,
        sampling=sampling,
        stop=tuple(stop or ()),
        logprobs=_get(body, "logprobs", bool, default=False),
        return_token_ids=_get(body, "return_token_ids", bool, default=False),
        request_id=_get(body, "request_id", str),
        trajectory_id=_get(body, "trajectory_id", str),
    )


def _messages(value: Any, *, token_in: bool) -> tuple[ChatMessage, ...]:
    if value is None and token_in:
        return ()
    if not isinstance(value, list) or not (value or token_in):
        raise ApiError("messages: expected a non-empty list of messages", param="messages")
    out = []
    for i, message in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ApiError(f"{where}: {_kind(message)}; expected an object with role and content", param=where)
        extra = sorted(set(message) - {"role", "content", "name"})
        if extra:
            raise ApiError(f"{where}.{extra[0]}: unsupported message field", param=f"{where}.{extra[0]}")
        role = message.get("role")
        if role not in _ROLES:
            raise ApiError(f"{where}.role: {role!r}; expected one of {', '.join(_ROLES)}", param=f"{where}.role")
        out.append(ChatMessage(role, _content(message.get("content"), where, token_in=token_in)))
    return tuple(out)


def _content(value: Any, where: str, *, token_in: bool) -> tuple[str | ImageInput, ...]:
    where = f"{where}.content"
    if isinstance(value, str):
        parts: list[Any] = [{"type": "text", "text": value}]
    elif isinstance(value, list):
        parts = value
    else:
        raise ApiError(f"{where}: {_kind(value)}; expected a string or a list of content parts", param=where)
    out: list[str | ImageInput] = []
    for j, part in enumerate(parts):
        at = f"{where}[{j}]" if isinstance(value, list) else where
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if token_in:
                raise ApiError(
                    f"{at}: text is not allowed with prompt_token_ids (the ids are the whole prompt;"
                    " the messages carry only its images)",
                    param=at,
                )
            if not isinstance(part.get("text"), str):
                raise ApiError(f"{at}.text: expected a string", param=f"{at}.text")
            out.append(_check_unicode(part["text"], f"{at}.text"))
        elif kind == "image_url":
            out.append(_image(part, at))
        else:
            raise ApiError(
                f"{at}: content part of type {kind!r}; expected 'text' or 'image_url'", param=f"{at}.type"
            )
    return tuple(out)


def _image(part: dict, at: str) -> ImageInput:
    uuid = part.get("uuid")
    if uuid is not None and not (isinstance(uuid, str) and 0 < len(uuid) <= 256):
        raise ApiError(f"{at}.uuid: expected a string of 1 to 256 characters", param=f"{at}.uuid")
    image_url = part.get("image_url")
    if image_url is None:
        if uuid is None:
            raise ApiError(
                f"{at}: image_url is null but no uuid names the image to reuse; send the image, or its uuid",
                param=f"{at}.uuid",
            )
        return ImageInput(at, None, uuid)
    url = image_url.get("url") if isinstance(image_url, dict) else None
    if not isinstance(url, str) or not url:
        raise ApiError(
            f"{at}.image_url: expected {{'url': 'data:image/png;base64,...'}}, or null with a uuid",
            param=f"{at}.image_url",
        )
    return ImageInput(at, url, uuid)


def _token_ids(body: dict, name: str) -> np.ndarray | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(i) is int and 0 <= i < 2**31 for i in value):
        raise ApiError(f"{name}: expected a list of non-negative integer token ids", param=name)
    return np.asarray(value, dtype=np.int32)


def _get(
    body: dict,
    name: str,
    kind: type,
    *,
    lo: float | None = None,
    hi: float | None = None,
    open_lo: bool = False,
    default: Any = None,
) -> Any:
    value = body.get(name)
    if value is None:
        return default
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float:  # an int of any size compares with the bounds; only a float can be nan or inf
        ok = isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and math.isfinite(value)
    if ok and lo is not None:
        ok = value > lo if open_lo else value >= lo
    if ok and hi is not None:
        ok = value <= hi
    if not ok:
        bounds = f" in {'(' if open_lo else '['}{lo}, {hi}]" if hi is not None else f" >= {lo}" if lo is not None else ""
        shown = reprlib.repr(value)  # a 60 MB list sent as temperature is not echoed back whole
        raise ApiError(f"{name}: {shown}; expected {_article(kind)}{bounds}", param=name)
    return float(value) if kind is float else value


def _check_unicode(text: str, where: str) -> str:
    """JSON's ``\\ud800`` escapes decode to lone surrogates, which no tokenizer can encode."""
    try:
        text.encode()
    except UnicodeEncodeError:
        message = f"{where}: holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape)"
        raise ApiError(message, param=where) from None
    return text


def _too_deep(value: Any) -> bool:
    """Whether ``value`` nests lists and dicts deeper than ``MAX_JSON_DEPTH`` (level by level: no recursion)."""
    level = [value] if isinstance(value, (list, dict)) else []
    for _ in range(MAX_JSON_DEPTH):
        level = [
            child
            for container in level
            for child in (container.values() if isinstance(container, dict) else container)
            if isinstance(child, (list, dict))
        ]
    return bool(level)


def _article(kind: type) -> str:
    return {int: "an integer", float: "a number", bool: "a boolean", str: "a string"}[kind]


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null"}.get(type(value), type(value).__name__)
