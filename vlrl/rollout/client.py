"""The inference client: one per loop host, shared by all of its Agent Loops.

- **Replicas.** A new trajectory goes to the replica with the least load as the replicas
  themselves report it (a global view: every client's requests count), and its later turns
  stick to that replica so its KV-prefix and image caches hit.
- **Delta shipping.** Per trajectory, a ``DeltaTracker`` knows which content hashes the replica
  already holds; a request carries pixels only for the others. A ``CacheMiss`` answer (eviction,
  restart) makes the client forget those hashes and resend, never fail the rollout.
- **Branches.** A branch of a branching rollout (``fork_trajectory``) starts on its root's replica
  with its root's delta state: the images of the shared prefix go by reference, and the replica's
  KV prefix of the root serves the prompt they share.
- **Tile shipping.** To a replica that takes tiles (``Endpoint.takes_tiles``: Ray replicas), a new
  image goes as the tiles the replica lacks, against the trajectory's previous screen
  (``mm.tile_wire``): a turn that changed a few tiles ships kilobytes, not a screenshot. Any miss
  starts the trajectory's tiles afresh. HTTP endpoints (vLLM's API) take whole images.
- **Faults**, classified the same way by every endpoint (Ray or HTTP):

  - ``TransientEndpointError`` (overload, timeout) is retried with exponential back-off;
  - ``EndpointUnavailable`` (the replica died or is restarting) drops the trajectory's
    stickiness, and the next try starts afresh on the least-loaded live replica;
  - ``BadRequestError`` (the engine refused the request: the caller's fault) and
    ``EngineError`` (the engine failed in a way a retry would repeat) are never retried: the
    caller, and so the episode, gets them with the engine's reason.

  After the last try the caller gets an ``InferenceError`` that says what happened.
- **Cache-miss bound.** A turn resends at most ``max_resends`` times over all its tries (the
  second resend and later ship every image), so a replica that keeps missing costs at most
  ``1 + max_resends`` requests and then an ``InferenceError``, not a resend storm on every retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol

import numpy as np

from vlrl.config import Ge, Gt
from vlrl.mm import DeltaTracker, content_hash
from vlrl.mm.tile_wire import TileSender
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, ImagePart, SamplingParams


class EndpointUnavailable(Exception):
    """The replica is gone (died, restarted under a new handle, unreachable)."""


class TransientEndpointError(Exception):
    """A failure worth retrying on the same replica (overload, timeout, a server's "try later")."""


class BadRequestError(ValueError):
    """The engine refused the request as malformed (ids out of vocabulary, image runs that do not
    match the images): the caller's fault, so a retry would be refused the same way."""


class EngineError(RuntimeError):
    """The engine failed unexpectedly on a valid request (a bug, a server's 500): not retried,
    since the same request would fail the same way; the message is the engine's reason."""


class InferenceError(RuntimeError):
    """Inference failed after every retry; the message says how."""


class Endpoint(Protocol):
    name: str
    takes_tiles: bool
    """Whether it accepts ``ImagePart.tiles``; an endpoint without the attribute gets whole images."""

    async def generate(self, request: GenerateRequest) -> GenerateResult | CacheMiss: ...
    async def load(self) -> int: ...
    async def forget(self, trajectory_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ContextImage:
    """An image of a trajectory's context; the client always holds its pixels."""

    content_hash: str
    pixels: np.ndarray

    @classmethod
    def of(cls, pixels: np.ndarray) -> ContextImage:
        return cls(content_hash(pixels), pixels)

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])


@dataclass(slots=True)
class ClientStats:
    requests: int = 0
    image_bytes_sent: int = 0
    images_referenced: int = 0
    cache_misses: int = 0
    retries: int = 0
    reroutes: int = 0


class InferenceClient:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """Retries, back-off and limits of the per-host inference client."""

        retries: Annotated[int, Ge(0)] = 3
        """Further tries after a failed request (transient error or lost replica)."""

        backoff_s: Annotated[float, Ge(0)] = 0.2
        """First back-off; it doubles with each retry."""

        backoff_max_s: Annotated[float, Ge(0)] = 5.0
        """Longest back-off between two tries."""

        request_timeout_s: Annotated[float, Gt(0)] = 300.0
        """A request running longer counts as a transient failure."""

        max_resends: Annotated[int, Ge(0)] = 2
        """Cache misses answered by resending, per turn over all its tries; the second resend ships
        every image, as whole pixels (the replica's caches may be smaller than the context). One
        more miss fails the turn with ``InferenceError``."""

        image_shipping: Literal["delta", "full"] = "delta"
        """'delta' ships each image's pixels once per trajectory and references after; 'full' resends
        every image with every request (for endpoints that cannot hold images between requests)."""

        image_tile_px: Annotated[int, Ge(8)] | None = 64
        """With 'delta' shipping, a new image goes to endpoints that take tiles as the tiles (of this
        side) it lacks; None ships whole pixels."""

    def __init__(self, endpoints: Sequence[Endpoint], config: InferenceClient.Config | None = None) -> None:
        if not endpoints:
            raise ValueError("inference client: needs at least one endpoint")
        self._endpoints = list(endpoints)
        self._config = config or InferenceClient.Config()
        self._sticky: dict[str, int] = {}
        self._trackers: dict[str, DeltaTracker] = {}
        self._tiles: dict[str, TileSender] = {}  # per trajectory, for a replica that takes tiles
        self._forks: dict[str, str] = {}  # branch -> the trajectory it branched from
        self.stats = ClientStats()

    def fork_trajectory(self, parent: str, child: str) -> None:
        """Start trajectory ``child`` as a branch of ``parent`` (a branching rollout), before its
        first request: it goes to the replica that serves ``parent``, ships by reference the
        images that replica holds of ``parent`` (and as tiles against them the new ones), and its
        requests name ``parent`` (``GenerateRequest.fork_of``), so the replica's KV prefix of
        ``parent`` serves the prompt they share. ``parent`` must not be ended before."""
        if child in self._trackers or child in self._sticky:
            raise ValueError(f"fork_trajectory: trajectory {child!r} has made requests already; fork before the first")
        self._forks[child] = parent
        if parent in self._sticky:
            self._sticky[child] = self._sticky[parent]
            tracker = self._trackers[child] = DeltaTracker()
            tracker.shipped(self._trackers[parent].held())
            if parent in self._tiles:
                self._tiles[child] = self._tiles[parent].fork()

    async def generate(
        self,
        trajectory_id: str,
        prompt_ids: np.ndarray,
        images: Sequence[ContextImage],
        sampling: SamplingParams,
        *,
        request_id: str,
    ) -> GenerateResult:
        config = self._config
        errors: list[str] = []
        resends = 0
        attempt = 0
        while True:
            replica = await self._replica_for(trajectory_id)
            endpoint = self._endpoints[replica]
            try:
                answer = await self._send(endpoint, trajectory_id, prompt_ids, images, sampling, request_id, resends)
            except EndpointUnavailable as error:
                # The replica may be restarting with empty caches, or gone: start afresh on the
                # least-loaded replica that answers (possibly this one, once it is back).
                errors.append(f"{endpoint.name} unavailable: {error}")
                self._sticky.pop(trajectory_id, None)
                self._trackers[trajectory_id].reset()
                self._tiles.pop(trajectory_id, None)
                self.stats.reroutes += 1
            except (TransientEndpointError, asyncio.TimeoutError) as error:
                errors.append(f"{endpoint.name}: {type(error).__name__}: {error}")
            else:
                if not isinstance(answer, CacheMiss):
                    return answer
                if resends == config.max_resends:
                    raise InferenceError(
                        f"request {request_id} of trajectory {trajectory_id}: {endpoint.name} still misses"
                        f" {len(answer.missing)} image(s) after {resends} resend(s)"
                        + (", the last with every image" if resends >= 2 else "")
                    )
                resends += 1
                continue
            attempt += 1
            if attempt > config.retries:
                raise InferenceError(
                    f"request {request_id} of trajectory {trajectory_id} failed after {attempt} tries: "
                    + "; ".join(errors)
                )
            self.stats.retries += 1
            await asyncio.sleep(min(config.backoff_max_s, config.backoff_s * 2 ** (attempt - 1)))

    async def end_trajectory(self, trajectory_id: str) -> None:
        """Drop the trajectory's stickiness and let its replica free the cached prefix."""
        self._forks.pop(trajectory_id, None)
        self._trackers.pop(trajectory_id, None)
        self._tiles.pop(trajectory_id, None)
        replica = self._sticky.pop(trajectory_id, None)
        if replica is not None:
            try:
                await self._endpoints[replica].forget(trajectory_id)
            except (EndpointUnavailable, TransientEndpointError):
                pass  # a replica that is gone holds nothing to free

    async def _send(
        self,
        endpoint: Endpoint,
        trajectory_id: str,
        prompt_ids: np.ndarray,
        images: Sequence[ContextImage],
        sampling: SamplingParams,
        request_id: str,
        resends: int,
    ) -> GenerateResult | CacheMiss:
        """One request; from the second resend on (or with 'full' shipping) it carries every image."""
        tracker = self._trackers[trajectory_id]
        if resends >= 2 or self._config.image_shipping == "full":
            tracker.reset()  # a replica cache smaller than the context: ship every image again
            self._tiles.pop(trajectory_id, None)
        tiles = None if resends >= 2 else self._tile_sender(endpoint, trajectory_id)  # the last resort: pixels
        parts = await asyncio.to_thread(image_parts, images, tracker, tiles) if tiles else image_parts(images, tracker)
        request = GenerateRequest(
            request_id=request_id,
            trajectory_id=trajectory_id,
            prompt_ids=np.asarray(prompt_ids, dtype=np.int32),
            images=parts,
            sampling=sampling,
            fork_of=self._forks.get(trajectory_id, ""),
        )
        answer = await asyncio.wait_for(endpoint.generate(request), self._config.request_timeout_s)
        self.stats.requests += 1
        self.stats.image_bytes_sent += request.image_bytes
        if isinstance(answer, CacheMiss):
            # The replica keeps what this request carried; only the reported hashes go again.
            self.stats.cache_misses += len(answer.missing)
            tracker.shipped(part.content_hash for part in request.images if part.carried)
            tracker.lost(answer.missing)
            self._tiles.pop(trajectory_id, None)  # what the replica holds of the tiles is unknown now
            return answer
        self.stats.images_referenced += sum(not part.carried for part in request.images)
        tracker.shipped(part.content_hash for part in request.images)
        return answer

    def _tile_sender(self, endpoint: Endpoint, trajectory_id: str) -> TileSender | None:
        tile = self._config.image_tile_px
        if tile is None or self._config.image_shipping == "full" or not getattr(endpoint, "takes_tiles", False):
            return None
        return self._tiles.setdefault(trajectory_id, TileSender(tile))

    async def _replica_for(self, trajectory_id: str) -> int:
        self._trackers.setdefault(trajectory_id, DeltaTracker())
        if trajectory_id in self._sticky:
            return self._sticky[trajectory_id]
        replicas = range(len(self._endpoints))
        loads = await asyncio.gather(*(self._load(i) for i in replicas))
        replica = min(zip(loads, replicas))[1]
        self._sticky[trajectory_id] = replica
        return replica

    async def _load(self, replica: int) -> float:
        """The replica's own count of queued and running requests; unreachable ones rank last."""
        try:
            return await self._endpoints[replica].load()
        except (EndpointUnavailable, TransientEndpointError):
            return float("inf")


def image_parts(
    images: Sequence[ContextImage], tracker: DeltaTracker, tiles: TileSender | None = None
) -> tuple[ImagePart, ...]:
    """The first occurrence of each hash the replica lacks carries its image (as the tiles it lacks
    when ``tiles``, else pixels); the rest are references."""
    sent: set[str] = set()
    parts = []
    for image in images:
        key, width, height = image.content_hash, image.width, image.height
        ship = tracker.needs_pixels(key) and key not in sent
        sent.add(key)
        if not ship:
            parts.append(ImagePart(key, width, height))
        elif tiles is not None:
            parts.append(ImagePart(key, width, height, tiles=tiles.encode(key, image.pixels)))
        else:
            parts.append(ImagePart(key, width, height, image.pixels))
    return tuple(parts)
