"""One trajectory's chat requests, answered by the policy and traced token for token.

An agent program speaks OpenAI's chat API in messages; training needs the exact ids the policy
conditioned on and sampled. So each request is turned into prompt ids here, sent token-in to the
policy's engine replicas (the loop host's ``InferenceClient``), and recorded as a turn of a
``Trajectory``: prompt ids, reply ids, their logprobs, the loss mask, images by content hash,
the policy version.

Re-tokenising a reply's text need not give back the ids the policy sampled, so a request that
continues the conversation is spliced: when its messages are the previous request's plus the
reply as it was returned (text equal, images equal by content hash) and the template renders
that prefix unchanged, its prompt is the previous prompt, the sampled ids themselves, and only
the new messages' rendering after them. It extends the trajectory's current sequence. Any
other request (the agent summarised its memory, dropped a screenshot, edited a reply) is
rendered whole and starts a new sequence of the same trajectory (``Trajectory.set_context``):
every sequence holds exactly what the policy saw, and only sampled tokens carry loss.

Sampling is the source's, not the request's: temperature and top-p come from
``AgentBehaviour`` (the trainer scores tokens under the distribution that sampled them), a
request's ``max_tokens`` is capped at ``agent.max_tokens``, each request is seeded as the Agent
Loop seeds its turns, and ``agent.max_turns`` bounds the requests of a run (more get a 400, which
the ``openai`` client does not retry). Requests of one
trajectory are answered one at a time, in arrival order.

With a ``teacher`` (a warm start's demonstrations, ``rollout.external.teacher``), the teacher
writes each reply in place of the policy: its text becomes the ids the policy would have had to
sample (then the end-of-turn token, zero logprobs), traced and spliced the same way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

from vlrl.config import AgentBehaviour
from vlrl.rollout.agent_loop import turn_seed
from vlrl.rollout.chat import Segment
from vlrl.rollout.client import ContextImage, InferenceClient
from vlrl.rollout.protocol import GenerateResult, SamplingParams
from vlrl.rollout.server.media import ImageResolver
from vlrl.rollout.server.prompt import ChatTemplate
from vlrl.rollout.server.wire import ApiError, ChatMessage, ChatRequest, ImageInput, load_json, parse_chat_request
from vlrl.rollout.trajectory import Trajectory

_MAX_REQUEST_BYTES = 64 * 2**20
_MAX_IMAGES = 256


@dataclass(slots=True)
class TraceCounts:
    """What one run's endpoint saw, counted as it happened."""

    requests: int = 0
    """Chat requests answered by the policy (each a turn of the trajectory)."""
    refused: int = 0
    """Requests answered with an error (malformed, over a limit, past ``max_turns``)."""


@dataclass(frozen=True, slots=True)
class _Turn:
    """What the next request must repeat to continue this one."""

    messages: tuple[Any, ...]
    """The request's messages as comparable keys (images by content hash), then the reply's."""
    text: str
    """Its rendering, the reply's text and (if the policy stopped) the stop token's text."""
    images: int
    """Images of the sequence so far."""


class ChatTracer:
    def __init__(
        self,
        trajectory_id: str,
        *,
        client: InferenceClient,
        template: ChatTemplate,
        agent: AgentBehaviour,
        patch_rule: Any,
        stop_token_id: int,
        teacher: Callable[[dict[str, Any], list[ContextImage]], Awaitable[str]] | None = None,
    ) -> None:
        """``teacher``: the reply text for a request body and its images, written in place of the
        policy's."""
        self.trajectory = Trajectory(trajectory_id)
        self.counts = TraceCounts()
        self._client = client
        self._template = template
        self._agent = agent
        self._stop = stop_token_id
        self._teacher = teacher
        self._images = ImageResolver(
            rule=patch_rule, max_images=_MAX_IMAGES, max_pixels=4096 * 4096, max_request_pixels=2 * 4096 * 4096,
            max_bytes=_MAX_REQUEST_BYTES, remote_hosts=(), max_uuids=_MAX_IMAGES,
        )  # fmt: skip
        self._pixels: dict[str, np.ndarray] = {}
        self._last: _Turn | None = None
        self._lock = asyncio.Lock()
        self.failure: str | None = None
        """Why the trajectory cannot be trained (the engine failed a request), once it happened."""

    async def answer(self, raw: bytes) -> dict[str, Any]:
        """The OpenAI completion for one request body; an ``ApiError`` for a request refused."""
        async with self._lock:
            if self.failure is not None:
                self.counts.refused += 1
                raise ApiError(f"this trajectory failed earlier ({self.failure}); end the episode", status=500)
            try:
                return await self._answer(raw)
            except ApiError:
                self.counts.refused += 1
                raise
            except Exception as error:  # the policy could not answer: the turn is lost, so is the trajectory
                self.failure = self.failure or f"request {self.counts.requests}: {type(error).__name__}: {error}"
                raise

    async def close(self) -> None:
        await self._images.close()

    async def _answer(self, raw: bytes) -> dict[str, Any]:
        agent = self._agent
        if self.counts.requests >= agent.max_turns:
            raise ApiError(f"this episode already made {agent.max_turns} requests, the source's agent.max_turns; end it")
        body, chat = await asyncio.to_thread(_parse, raw, agent.max_tokens)
        parts, missing = await self._images.resolve(chat.images, unknown_as_hash=False)
        if missing:
            raise ApiError(f"messages: image uuid(s) {[chat.images[i].uuid for i in missing]} were never sent with their bytes")
        for part in parts:
            if part.pixels is not None:
                self._pixels.setdefault(part.content_hash, part.pixels)
        images = [ContextImage(part.content_hash, self._pixels[part.content_hash]) for part in parts]
        stops = await asyncio.to_thread(self._template.stop_token_ids, chat.stop, param="stop")
        context, text = await asyncio.to_thread(self._context, chat.messages, images)
        # Nothing may refuse the request from here on: the trajectory now holds its prompt.
        self.trajectory.set_context(context, images)  # a new sequence unless the context extends the current one
        turn = self.counts.requests
        sampling = SamplingParams(
            temperature=agent.temperature,
            top_p=agent.top_p,
            max_tokens=min(chat.sampling.max_tokens, agent.max_tokens),
            stop_token_ids=(self._stop, *chat.sampling.stop_token_ids, *stops),
            seed=turn_seed(self.trajectory.trajectory_id, turn),
        )
        sequence = self.trajectory.current
        request_id = f"{self.trajectory.trajectory_id}#{turn}"
        if self._teacher is None:
            result = await self._client.generate(
                self.trajectory.trajectory_id, sequence.prompt_array(), sequence.images, sampling, request_id=request_id
            )
        else:
            result = await self._taught(body, images, sampling, request_id)
        self.trajectory.add_generated(result)
        self.counts.requests += 1
        stopped = result.finish_reason == "stop"
        ids = [int(t) for t in result.token_ids]
        reply = self._template.text(ids[:-1] if stopped else ids)
        self._last = _Turn(
            (*_keys(chat.messages, images), ("assistant", (reply,))),
            text + reply + (self._template.pieces(ids[-1:])[0] if stopped else ""),
            len(sequence.images),
        )
        return _completion(chat, turn, self.trajectory.trajectory_id, reply, result, self._template, sequence.context_lengths[-1])

    async def _taught(
        self, body: dict[str, Any], images: list[ContextImage], sampling: SamplingParams, request_id: str
    ) -> GenerateResult:
        """The teacher's reply as the engine would have returned it; one longer than the policy
        may write (``agent.max_tokens``) could never be imitated, so it fails the trajectory."""
        text = await self._teacher({**body, "max_tokens": sampling.max_tokens}, images)
        ids = [*(await asyncio.to_thread(self._template.ids, text, [])).tolist(), self._stop]
        if len(ids) > sampling.max_tokens:
            raise ValueError(
                f"the teacher's reply is {len(ids)} tokens with the end of turn, over agent.max_tokens"
                f" ({sampling.max_tokens}): {text!r:.80}"
            )
        return GenerateResult(request_id, np.asarray(ids, np.int32), np.zeros(len(ids), np.float32), "stop", 0, 0, 0)

    def _context(self, messages: tuple[ChatMessage, ...], images: list[ContextImage]) -> tuple[Segment, str]:
        """The prompt of ``messages`` and the rendering it stands for: the current sequence's ids
        and the new messages' rendering after them when they continue the last turn (spliced),
        else their whole rendering (blocking: tokenizes)."""
        text = self._template.render(messages)
        last = self._last
        keys = _keys(messages, images)
        if last is not None and keys[: len(last.messages)] == last.messages and text.startswith(last.text):
            sequence = self.trajectory.current
            tail = self._template.ids(text[len(last.text) :], [(i.width, i.height) for i in images[last.images :]])
            ids = sequence.token_ids + tail.tolist()
            offsets = sequence.image_offsets + [len(sequence.token_ids) + o for o in _pad_runs(tail, self._template.image_pad)]
            return Segment(ids, offsets), text
        ids = self._template.ids(text, [(i.width, i.height) for i in images])
        return Segment(ids.tolist(), _pad_runs(ids, self._template.image_pad)), text


_MESSAGE_FIELDS = ("role", "content", "name")


def _parse(raw: bytes, default_max_tokens: int) -> tuple[dict[str, Any], ChatRequest]:
    """The body and the request as ``vlrl serve`` reads it, but for keys of a message other than
    role, content and name: agents keep their own bookkeeping there (AgentLab sends each reply back
    with its ``log_probs``), and they change nothing of what the policy sees, so they are dropped."""
    body = load_json(raw)
    if isinstance(body, dict) and isinstance(body.get("messages"), list):
        body["messages"] = [
            {k: v for k, v in m.items() if k in _MESSAGE_FIELDS} if isinstance(m, dict) else m for m in body["messages"]
        ]
    chat = parse_chat_request(body, default_max_tokens=default_max_tokens)
    if chat.prompt_token_ids is not None:
        raise ApiError("prompt_token_ids: this endpoint renders the messages itself; send messages", param="prompt_token_ids")
    return body, chat


def _keys(messages: tuple[ChatMessage, ...], images: list[ContextImage]) -> tuple[Any, ...]:
    """Messages as comparable values: text as sent, each image as its content hash."""
    hashes = iter(image.content_hash for image in images)
    return tuple((m.role, tuple(next(hashes) if isinstance(p, ImageInput) else p for p in m.content)) for m in messages)


def _pad_runs(ids: np.ndarray, pad: int) -> list[int]:
    """Where each run of image pads starts."""
    ids = np.asarray(ids)
    is_pad = ids == pad
    starts = is_pad & ~np.concatenate([[False], is_pad[:-1]])
    return np.flatnonzero(starts).tolist()


def _completion(
    chat: ChatRequest,
    turn: int,
    trajectory_id: str,
    reply: str,
    result: GenerateResult,
    template: ChatTemplate,
    prompt_tokens: int,
) -> dict[str, Any]:
    ids = result.token_ids.tolist()
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": reply},
        "finish_reason": result.finish_reason,
        "logprobs": None,
    }
    if chat.logprobs:
        choice["logprobs"] = {
            "content": [
                {"token": piece, "logprob": logprob, "bytes": list(piece.encode()), "top_logprobs": []}
                for piece, logprob in zip(template.pieces(ids), result.logprobs.tolist())
            ]
        }
    if chat.return_token_ids:
        choice["token_ids"] = ids
    return {
        "id": f"chatcmpl-{trajectory_id}#{turn}",
        "object": "chat.completion",
        "created": 0,
        "model": chat.model or "policy",
        "choices": [choice],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(ids), "total_tokens": prompt_tokens + len(ids)},
        "policy_version": result.policy_version,
    }
