"""``EngineCore``: the embedded engine's request handling, dynamic batching and caches, in-process.

Every ``generate`` call is checked (its sampling too, so no request's values can fail the batch
it joins) and its images resolved on the event loop (preprocessing on a thread pool), then
queued. One worker task takes up to ``max_batch`` queued requests, waiting at most
``batch_wait_ms`` for the batch to fill, and hands the batch to the ``ModelRunner`` on the
single compute thread; the event loop stays free to accept requests meanwhile. Requests of one
batch may differ in prompt length, images and cached prefix (see ``runner``). A caller that
gives up (cancels its ``generate``: a client that disconnected) is skipped while queued, and its
row leaves the batch at the next decode step while running.

Weight updates wait for the batch in flight: its requests finish on the old weights and carry
the old version; requests not yet in a batch run on the new weights. An update drops every KV
prefix (keys and values depend on the weights) but keeps the image cache (pixels do not).

With a plug-in encoder (``config.encoder``) images are preprocessed and encoded by it, exactly as
the trainer runs it, and its weights arrive with every update under ``encoder.``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from transformers import AutoProcessor

from encoders.spec import ResolvedEncoder
from vlrl.mm import patch_rule_of
from vlrl.mm.tile_wire import TileReceiver
from vlrl.rollout.engine.images import ImageCache, ProcessedImage, preprocess, preprocess_plug_in
from vlrl.rollout.engine.prefix import ImageSpan, PrefixCache
from vlrl.rollout.engine.runner import ModelRunner, Outcome, Sequence
from vlrl.rollout.engine.sampling import check_sampling
from vlrl.rollout.engine.tiled_parts import untiled
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, ScoreResult

if TYPE_CHECKING:
    from vlrl.rollout.engine.embedded import EmbeddedEngine


@dataclass(slots=True)
class _Pending:
    request: GenerateRequest
    seq: Sequence
    done: asyncio.Future[GenerateResult]


@dataclass(slots=True)
class _Update:
    state_dict: Mapping[str, Any]
    version: int
    done: asyncio.Future[None]


@dataclass(slots=True)
class _Counters:
    requests: int = 0
    cache_miss_replies: int = 0
    batches: int = 0
    batched_requests: int = 0
    prefill_tokens: int = 0
    reused_prefix_tokens: int = 0
    generated_tokens: int = 0
    image_cache_hits: int = 0
    image_cache_misses: int = 0
    image_bytes_received: int = 0
    weight_updates: int = 0
    weight_pause_s: float = 0.0
    """Seconds the compute thread spent loading new weights: all that a push holds back requests
    beyond the batch running when it came, which finishes on the old weights."""
    max_batch_size: int = 0


class EngineCore:
    def __init__(self, config: EmbeddedEngine.Config, model_path: str, encoder: ResolvedEncoder | None = None) -> None:
        """``model_path``: the checkpoint folder served (any family of ``vlrl.models``). ``encoder``: ``config.encoder``
        as the driver resolved it (None: resolve it here)."""
        if config.torch_threads is not None:
            torch.set_num_threads(config.torch_threads)
        self._config = config
        processor = AutoProcessor.from_pretrained(model_path)
        if encoder is None and config.encoder is not None:
            encoder = config.resolved_encoder(model_path)
        plug_in = encoder.build(model_path) if encoder is not None else None
        self._preprocess_image = (
            partial(preprocess, processor.image_processor)
            if plug_in is None
            else partial(preprocess_plug_in, plug_in, patch_rule_of(processor))
        )
        tokenizer = processor.tokenizer
        stops = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")} - {None, tokenizer.unk_token_id}
        self._runner = ModelRunner.load(
            model_path,
            dtype=getattr(torch, config.dtype),
            device=config.device,
            stop_token_ids=frozenset(stops),
            encoder=plug_in,
            record_routing=config.record_routing,
        )
        model_config = self._runner.model.config
        self._image_token_id = model_config.image_token_id
        self._vocab_size = model_config.get_text_config().vocab_size
        self._images = ImageCache(int(config.image_cache_mb * 2**20))
        self._tiles = TileReceiver(int(config.tile_cache_mb * 2**20))
        self._prefixes = PrefixCache(config.max_cached_trajectories)
        self._compute = ThreadPoolExecutor(1, thread_name_prefix="engine-compute")
        self._preprocess = ThreadPoolExecutor(config.preprocess_threads, thread_name_prefix="engine-preprocess")
        self._queue: deque[_Pending] = deque()
        self._updates: deque[_Update] = deque()
        self._running: list[_Pending] = []
        self._wake = asyncio.Event()
        self._worker: asyncio.Task | None = None
        self._version = 0
        self._in_flight = 0
        self._counts = _Counters()

    async def generate(self, request: GenerateRequest) -> GenerateResult | CacheMiss:
        self._start_worker()
        self._in_flight += 1
        self._counts.requests += 1
        try:
            check_sampling(request.sampling)
            prompt = self._checked_prompt(request)
            runs = self._image_runs(request, prompt)
            images = await self._resolve_images(request)
            if isinstance(images, CacheMiss):
                self._counts.cache_miss_replies += 1
                return images
            spans = self._checked_spans(request, runs, images)
            seq = Sequence(
                prompt=prompt,
                images=tuple(images),
                spans=spans,
                sampling=request.sampling,
                prefix=None,
                keep_prefix=self._prefixes.capacity > 0,
            )
            pending = _Pending(request, seq, asyncio.get_running_loop().create_future())
            self._queue.append(pending)
            self._wake.set()
            try:
                return await pending.done
            except asyncio.CancelledError:  # the runner reads max_tokens every step: the row stops at the next
                seq.sampling = replace(seq.sampling, max_tokens=1)
                raise
        finally:
            self._in_flight -= 1

    async def score(self, request: GenerateRequest) -> ScoreResult | CacheMiss:
        """Per-token logprobs of ``request.prompt_ids`` (its sampling is ignored): a teacher's scores."""
        self._in_flight += 1
        try:
            prompt = self._checked_prompt(request)
            runs = self._image_runs(request, prompt)
            images = await self._resolve_images(request)
            if isinstance(images, CacheMiss):
                self._counts.cache_miss_replies += 1
                return images
            self._checked_spans(request, runs, images)
            version = self._version
            loop = asyncio.get_running_loop()
            logprobs = await loop.run_in_executor(self._compute, self._runner.score, prompt, tuple(images))
            return ScoreResult(request.request_id, logprobs, version)
        finally:
            self._in_flight -= 1

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor | np.ndarray], version: int) -> None:
        """Apply new weights between batches; returns once requests of ``version`` can run."""
        latest = max([self._version, *(u.version for u in self._updates)])
        if version <= latest:
            raise ValueError(f"update_weights: version={version}; expected more than the latest, {latest}")
        self._start_worker()
        update = _Update(state_dict, version, asyncio.get_running_loop().create_future())
        self._updates.append(update)
        self._wake.set()
        await update.done

    def restore(self, state_dict: Mapping[str, torch.Tensor | np.ndarray], version: int) -> None:
        """Load ``version``'s weights at once, before any request (a restarted replica catching up)."""
        self._runner.load_weights(state_dict)
        self._version = version

    def load(self) -> int:
        """Requests accepted and not yet answered (queued, preprocessing or running)."""
        return self._in_flight

    def policy_version(self) -> int:
        return self._version

    def forget(self, trajectory_id: str) -> None:
        """Drop the trajectory's KV prefix, including the one a running request would leave."""
        self._prefixes.drop(trajectory_id)
        for pending in self._running:
            if pending.request.trajectory_id == trajectory_id:
                pending.seq.keep_prefix = False

    def stats(self) -> dict[str, float]:
        c = self._counts
        return {
            "requests": c.requests,
            "cache_miss_replies": c.cache_miss_replies,
            "batches": c.batches,
            "mean_batch_size": c.batched_requests / c.batches if c.batches else 0.0,
            "max_batch_size": c.max_batch_size,
            "prefill_tokens": c.prefill_tokens,
            "reused_prefix_tokens": c.reused_prefix_tokens,
            "generated_tokens": c.generated_tokens,
            "cached_trajectories": len(self._prefixes),
            "image_cache_hits": c.image_cache_hits,
            "image_cache_misses": c.image_cache_misses,
            "image_cache_evictions": self._images.evictions,
            "image_cache_entries": len(self._images),
            "image_cache_bytes": self._images.nbytes,
            "image_bytes_received": c.image_bytes_received,
            "weight_updates": c.weight_updates,
            "weight_pause_s": c.weight_pause_s,
            "policy_version": self._version,
        }

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        self._compute.shutdown(wait=True)
        self._preprocess.shutdown(wait=True)

    # -- admission: everything a bad request can get wrong is found here, before it is queued

    def _checked_prompt(self, request: GenerateRequest) -> np.ndarray:
        ids = request.prompt_ids
        if not isinstance(ids, np.ndarray) or ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"request {request.request_id}: prompt_ids must be a 1-D integer numpy array")
        if len(ids) == 0:
            raise ValueError(f"request {request.request_id}: prompt_ids is empty")
        if ids.min() < 0 or ids.max() >= self._vocab_size:
            raise ValueError(
                f"request {request.request_id}: prompt_ids hold ids in [{ids.min()}, {ids.max()}];"
                f" expected 0 <= id < vocab_size={self._vocab_size}"
            )
        return ids.astype(np.int64)

    def _image_runs(self, request: GenerateRequest, prompt: np.ndarray) -> list[tuple[int, int]]:
        """The ``<|image_pad|>`` runs of ``prompt``: one per image, in order."""
        edges = np.diff(np.concatenate([[0], (prompt == self._image_token_id).astype(np.int8), [0]]))
        runs = list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))
        if len(runs) != len(request.images):
            raise ValueError(
                f"request {request.request_id}: prompt_ids hold {len(runs)} run(s) of <|image_pad|>"
                f" (id {self._image_token_id}) but {len(request.images)} image(s) were sent; each image"
                " needs one run of exactly its token count"
            )
        return runs

    def _checked_spans(
        self, request: GenerateRequest, runs: list[tuple[int, int]], images: list[ProcessedImage]
    ) -> tuple[ImageSpan, ...]:
        for (start, stop), part, image in zip(runs, request.images, images):
            if stop - start != image.num_tokens:
                raise ValueError(
                    f"image {part.content_hash}: prompt_ids hold {stop - start} <|image_pad|> tokens for it"
                    f" but its {part.width}x{part.height} pixels make {image.num_tokens} tokens"
                    f" (grid {image.grid_thw})"
                )
        return tuple(ImageSpan(start, stop, part.content_hash) for (start, stop), part in zip(runs, request.images))

    async def _resolve_images(self, request: GenerateRequest) -> list[ProcessedImage] | CacheMiss:
        """Each image's processed form: from the cache, else from the pixels (or tiles) sent, else a miss."""
        self._counts.image_bytes_received += request.image_bytes
        if any(part.tiles is not None for part in request.images):
            loop = asyncio.get_running_loop()
            request = await loop.run_in_executor(self._preprocess, untiled, request, self._tiles)
        found: dict[str, ProcessedImage] = {}
        to_process = {}
        missing = []
        for part in request.images:
            image = self._images.get(part.content_hash)
            if image is not None:
                found[part.content_hash] = image
                self._counts.image_cache_hits += 1
            elif part.pixels is not None:
                to_process[part.content_hash] = part
            else:
                missing.append(part.content_hash)
                self._counts.image_cache_misses += 1
        loop = asyncio.get_running_loop()
        processed = await asyncio.gather(
            *(loop.run_in_executor(self._preprocess, self._preprocess_image, p) for p in to_process.values())
        )
        for key, image in zip(to_process, processed):
            self._images.put(key, image)
            found[key] = image
        if missing:
            return CacheMiss(request.request_id, tuple(dict.fromkeys(missing)))
        return [found[part.content_hash] for part in request.images]

    # -- the worker: one batch (or one weight update) at a time

    def _start_worker(self) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._serve())

    async def _serve(self) -> None:
        while True:
            while not self._queue and not self._updates:
                self._wake.clear()
                await self._wake.wait()
            if self._updates:
                await self._apply_update(self._updates.popleft())
                continue
            batch = await self._take_batch()
            if self._updates:  # arrived while the batch was filling: new weights first
                self._queue.extendleft(reversed(batch))
            elif batch:
                await self._run(batch)

    async def _take_batch(self) -> list[_Pending]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._config.batch_wait_ms / 1000
        while len(self._queue) < self._config.max_batch and not self._updates:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), deadline - loop.time())
            except asyncio.TimeoutError:
                break
        batch = []
        while self._queue and len(batch) < self._config.max_batch:
            pending = self._queue.popleft()
            if not pending.done.cancelled():
                batch.append(pending)
        return batch

    async def _run(self, batch: list[_Pending]) -> None:
        version = self._version
        self._running = batch
        self._counts.batches += 1
        self._counts.batched_requests += len(batch)
        self._counts.max_batch_size = max(self._counts.max_batch_size, len(batch))
        for pending in batch:  # looked up now, not at admission: an update may have dropped it since
            request = pending.request
            pending.seq.prefix = self._prefixes.get(request.trajectory_id) or (
                self._prefixes.get(request.fork_of) if request.fork_of else None
            )  # a branch's first request continues its root's KV, as far as their tokens agree
        try:
            outcomes = await asyncio.get_running_loop().run_in_executor(
                self._compute, self._runner.run, [p.seq for p in batch]
            )
        except Exception as error:  # one bad batch fails its requests, not the engine
            for pending in batch:
                if not pending.done.done():
                    pending.done.set_exception(error)
            return
        finally:
            self._running = []
        for pending, outcome in zip(batch, outcomes):
            self._finish(pending, outcome, version)

    def _finish(self, pending: _Pending, outcome: Outcome, version: int) -> None:
        request = pending.request
        if outcome.prefix is not None and pending.seq.keep_prefix:
            self._prefixes.put(request.trajectory_id, outcome.prefix)
        self._counts.prefill_tokens += outcome.prefill_tokens
        self._counts.reused_prefix_tokens += outcome.reused_prefix_tokens
        self._counts.generated_tokens += len(outcome.token_ids)
        if pending.done.done():  # the caller gave up
            return
        pending.done.set_result(
            GenerateResult(
                request_id=request.request_id,
                token_ids=outcome.token_ids,
                logprobs=outcome.logprobs,
                finish_reason=outcome.finish_reason,
                policy_version=version,
                prefill_tokens=outcome.prefill_tokens,
                reused_prefix_tokens=outcome.reused_prefix_tokens,
                extras=outcome.extras,
                prompt_extras=outcome.prompt_extras,
            )
        )

    async def _apply_update(self, update: _Update) -> None:
        started = time.perf_counter()
        try:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._compute, self._runner.load_weights, update.state_dict)
        except Exception as error:
            update.done.set_exception(error)
            return
        self._counts.weight_pause_s += time.perf_counter() - started
        self._version = update.version
        self._prefixes.clear()
        self._counts.weight_updates += 1
        update.done.set_result(None)
