"""The vLLM engine's translations, kept free of any vLLM import so they are tested on any machine.

``VLLMEngine`` (the Ray actor in ``vllm_engine``) is a thin loop around these functions:

- ``PixelCache`` + ``resolve_images``: the replica's own content-hash -> pixels LRU. vLLM keeps a
  processor cache too, but it cannot say which hashes it holds; answering ``CacheMiss`` from our
  own cache makes misses exact, and every request then hands vLLM the pixels of every image
  (in-process, no copy over the wire) with the hash as its uuid, so vLLM's cache only saves work.
- ``prompt_inputs``: a ``GenerateRequest`` as a vLLM ``TokensPrompt``. The Agent Loop sends each
  image's ``<|image_pad|>`` run already expanded; vLLM expands placeholders itself on token
  prompts, so each run is collapsed back to one pad, and ``check_expansion`` verifies afterwards
  that vLLM's expansion rebuilt exactly the ids the loop sent (token-level RL trains on them).
- ``sampling_kwargs`` / ``score_kwargs``: ``vllm.SamplingParams`` keyword arguments.
- ``generate_result`` / ``score_result``: vLLM's ``RequestOutput`` as protocol records (read by
  attribute only, so tests pass plain stand-ins); ``sampled_draws`` reads each draw's row of the
  distribution vLLM sampled from into the logprob and nucleus the embedded engine reports, and
  ``redraw`` / ``joined`` draw a position again where vLLM drew a vision placeholder.
- ``checkpoint_weights``: a trainer's state dict as the tensors vLLM's ``load_weights`` takes.

A LoRA run's pushes have their own module, ``vllm_lora``.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from vlrl.mm import PatchRule, content_hash
from vlrl.records.fields import SAMPLING_NUCLEUS
from vlrl.rollout.engine.sampling import SEED_LIMIT, sampled_extras, sampled_fields
from vlrl.rollout.protocol import CacheMiss, GenerateRequest, GenerateResult, SamplingParams, ScoreResult

if TYPE_CHECKING:
    from vlrl.models.family import ModelFamily

BANNED_LOGIT_BIAS = -100.0
"""vLLM clamps logit biases to [-100, 100]: -100 makes a vision placeholder (p ~ e^-100 relative)
never the argmax of a greedy request. vLLM's processed logprobs include the bias; ``sampled_draws``
takes it out again, so the placeholders stay in the reported distribution as in the embedded
engine's. Sampled requests are not biased: they draw placeholders again instead (``redraw``)."""

MAX_REDRAWS = 16
"""Placeholders one sampled request may draw (each drawn again) before it fails: a policy that
puts most of a reply's mass on them is broken, and the request says so rather than looping."""

CHECKPOINT_PREFIXES = ("model.language_model.", "model.visual.", "lm_head.")
"""Where a Hugging Face checkpoint of every supported family (Qwen2-VL, Qwen2.5-VL, Qwen3-VL with
its DeepStack mergers under ``model.visual.``; transformers >= 4.52) keeps its weights; vLLM's
model class of each family maps exactly these names onto its own modules (``hf_to_vllm_mapper``),
so the weight-name map from the trainer to vLLM is the identity for all of them (Qwen3-VL-MoE's fused
experts keep their names and change layout: ``ModelFamily.checkpoint_tensor``)."""

PLUGIN_ENCODER_PREFIX = "encoder."
"""Where a trainer with a plug-in vision encoder puts that encoder's weights."""


class PixelCache:
    """Least-recently-used canonical pixels by content hash, at most ``max_bytes`` in total.

    The newest entry is always kept, so an image larger than the whole bound still serves the
    request that brought it.
    """

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[str, np.ndarray] = OrderedDict()
        self.nbytes = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> np.ndarray | None:
        pixels = self._entries.get(key)
        if pixels is not None:
            self._entries.move_to_end(key)
        return pixels

    def put(self, key: str, pixels: np.ndarray) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        self._entries[key] = pixels
        self.nbytes += pixels.nbytes
        while self.nbytes > self._max_bytes and len(self._entries) > 1:
            _, evicted = self._entries.popitem(last=False)
            self.nbytes -= evicted.nbytes
            self.evictions += 1


def resolve_images(request: GenerateRequest, cache: PixelCache) -> list[np.ndarray] | CacheMiss:
    """Each image's pixels, in order: sent ones are checked and cached, referenced ones looked up;
    a reference the cache does not hold makes the answer a ``CacheMiss`` naming every such hash.

    A sent image's hash is checked first: a wrong one would file these pixels under another
    image's identity and poison the cache for every trajectory that references it.
    """
    found: dict[str, np.ndarray] = {}
    missing = []
    for part in request.images:
        if part.pixels is not None:
            actual = content_hash(part.pixels)
            if actual != part.content_hash:
                raise ValueError(
                    f"image {part.content_hash}: the pixels sent hash to {actual}; send the content_hash"
                    " of the canonical pixels (vlrl.mm.content_hash)"
                )
            cache.put(part.content_hash, part.pixels)
            found[part.content_hash] = part.pixels
        elif part.content_hash not in found:
            pixels = cache.get(part.content_hash)
            if pixels is None:
                missing.append(part.content_hash)
            else:
                found[part.content_hash] = pixels
    if missing:
        return CacheMiss(request.request_id, tuple(dict.fromkeys(missing)))
    return [found[part.content_hash] for part in request.images]


def checked_prompt(request: GenerateRequest, vocab_size: int) -> np.ndarray:
    """``request.prompt_ids`` as int64, refused unless a non-empty 1-D array of in-vocabulary ids."""
    ids = request.prompt_ids
    if not isinstance(ids, np.ndarray) or ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"request {request.request_id}: prompt_ids must be a 1-D integer numpy array")
    if len(ids) == 0:
        raise ValueError(f"request {request.request_id}: prompt_ids is empty")
    if ids.min() < 0 or ids.max() >= vocab_size:
        raise ValueError(
            f"request {request.request_id}: prompt_ids hold ids in [{ids.min()}, {ids.max()}];"
            f" expected 0 <= id < vocab_size={vocab_size}"
        )
    return ids.astype(np.int64)


def image_runs(prompt: np.ndarray, image_token_id: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` runs of ``<|image_pad|>`` in ``prompt``, in order: one per image."""
    edges = np.diff(np.concatenate([[0], (prompt == image_token_id).astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def prompt_inputs(
    request: GenerateRequest, prompt: np.ndarray, pixels: Sequence[np.ndarray], image_token_id: int, rule: PatchRule
) -> dict[str, Any]:
    """The vLLM ``TokensPrompt`` (a plain dict) for ``request``: each image's pad run collapsed to
    one pad (vLLM expands it again, by the same rule), images as PIL in order, uuids = hashes.

    Each run must be exactly its image's token count (``rule``): a prompt built for another
    image size would otherwise be silently re-expanded to a different sequence.
    """
    from PIL import Image

    runs = image_runs(prompt, image_token_id)
    if len(runs) != len(request.images):
        raise ValueError(
            f"request {request.request_id}: prompt_ids hold {len(runs)} run(s) of <|image_pad|>"
            f" (id {image_token_id}) but {len(request.images)} image(s) were sent; each image"
            " needs one run of exactly its token count"
        )
    for (start, stop), part in zip(runs, request.images):
        expected = rule.num_tokens(part.width, part.height)
        if stop - start != expected:
            raise ValueError(
                f"image {part.content_hash}: prompt_ids hold {stop - start} <|image_pad|> tokens for it"
                f" but its {part.width}x{part.height} pixels make {expected} tokens"
            )
    keep = np.ones(len(prompt), dtype=bool)
    for start, stop in runs:
        keep[start + 1 : stop] = False
    inputs: dict[str, Any] = {"prompt_token_ids": prompt[keep].tolist()}
    if request.images:
        inputs["multi_modal_data"] = {"image": [Image.fromarray(p) for p in pixels]}
        inputs["multi_modal_uuids"] = {"image": [part.content_hash for part in request.images]}
    return inputs


def check_expansion(request: GenerateRequest, prompt: np.ndarray, expanded: Sequence[int]) -> None:
    """Raise unless vLLM's prompt (placeholders expanded) is exactly the ids the client sent."""
    if len(expanded) == len(prompt) and np.array_equal(np.asarray(expanded), prompt):
        return
    at = next((i for i, (a, b) in enumerate(zip(prompt.tolist(), expanded)) if a != b), min(len(prompt), len(expanded)))
    raise RuntimeError(
        f"request {request.request_id}: vLLM expanded the prompt to {len(expanded)} ids but the client sent"
        f" {len(prompt)}; they first differ at position {at}. vLLM's image processor disagrees with the"
        " checkpoint's (min_pixels/max_pixels?)"
    )


def sampling_kwargs(sampling: SamplingParams, stop_token_ids: frozenset[int], banned: Sequence[int]) -> dict[str, Any]:
    """``vllm.SamplingParams`` arguments for one ``generate``: each token's logprob under the
    distribution its draw came from (vLLM's ``processed_logprobs`` mode, flat: ``sampled_draws``
    reads them), the engine's stop ids plus the request's, no detokenisation (ids are the output).
    Every vocabulary id's logprob comes back only where the request needs it (``logprobs=-1``;
    a row costs 4-8 bytes per vocabulary id per token, 0.6-1.2 MB with a 151k vocabulary): under
    top-p, whose nucleus count the trainer needs (the row's finite entries), and for a greedy
    request with placeholders, whose biased mass ``sampled_draws`` gives back; a sampled request
    without top-p (RL's default) gets the sampled token's alone. vLLM's ``logprob_token_ids``
    would give the placeholders' alone, but in a batch that mixes it with a full row vLLM returns
    the named ids for every request. The vision placeholders (``banned``) are never kept in a reply: a greedy request
    biases them out of the argmax; a sampled one stops at a drawn placeholder, which ``redraw``
    then draws again, so its nucleus and logprobs are of the model's own logits."""
    greedy = sampling.temperature == 0
    rows = whole_rows(sampling, banned)
    stops = stop_token_ids | set(sampling.stop_token_ids) | (set() if greedy else {int(i) for i in banned})
    return {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_tokens,
        "stop_token_ids": sorted(stops),
        "seed": sampling.seed,
        "logprobs": -1 if rows else 0,
        "flat_logprobs": True,
        "logit_bias": {int(i): BANNED_LOGIT_BIAS for i in banned} if greedy else {},
        "detokenize": False,
    }


def whole_rows(sampling: SamplingParams, banned: Sequence[int]) -> bool:
    """Whether a request needs every vocabulary id's logprob at each token (``sampling_kwargs``)."""
    return SAMPLING_NUCLEUS in sampled_fields(sampling) or (sampling.temperature == 0 and len(banned) > 0)


def score_kwargs() -> dict[str, Any]:
    """``vllm.SamplingParams`` arguments for ``score``: the logprob of every prompt id
    (``prompt_logprobs=0``); the one token it must also generate is ignored."""
    return {"temperature": 0.0, "max_tokens": 1, "prompt_logprobs": 0, "detokenize": False}


def generate_result(
    request: GenerateRequest, prompt: np.ndarray, output: Any, version: int, *, banned: Sequence[int] = ()
) -> GenerateResult:
    """A finished vLLM ``RequestOutput`` as the protocol's ``GenerateResult``: each token's logprob
    and, as the request's sampling needs them, its temperature and nucleus (``sampled_draws``;
    ``banned``: the ids ``sampling_kwargs`` biased). Tokens served from vLLM's prefix cache
    (``num_cached_tokens``) are reported as reused prefix.
    """
    check_expansion(request, prompt, output.prompt_token_ids)
    completion = output.outputs[0]
    if completion.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"request {request.request_id}: vLLM finished it with {completion.finish_reason!r}")
    ids = list(completion.token_ids)
    logprobs, nucleus = sampled_draws(request, ids, completion.logprobs, banned)
    cached = int(output.num_cached_tokens or 0)
    return GenerateResult(
        request_id=request.request_id,
        token_ids=np.asarray(ids, dtype=np.int32),
        logprobs=logprobs,
        finish_reason=completion.finish_reason,
        policy_version=version,
        prefill_tokens=len(prompt) - cached,
        reused_prefix_tokens=cached,
        extras=sampled_extras(request.sampling, nucleus),
    )


def sampled_draws(
    request: GenerateRequest, ids: Sequence[int], rows: Any, banned: Sequence[int]
) -> tuple[np.ndarray, list[int]]:
    """Each sampled token's float32 logprob and its draw's nucleus count, as ``EmbeddedEngine``
    reports them (``engine.sampling``), from the rows vLLM returns for ``sampling_kwargs``.

    ``rows`` is vLLM's ``FlatLogprobs``: position ``i`` spans ``start_indices[i]`` to
    ``end_indices[i]`` of ``token_ids`` and ``logprobs``; its first entry is the sampled token,
    the rest every vocabulary id where ``whole_rows`` asked for them. In ``processed_logprobs`` mode a row is the distribution the
    draw came from, ``log_softmax(z / T)`` over vLLM's top-p nucleus (-inf outside it; T = 1 for
    greedy requests), so the nucleus count is the row's finite entries: the kept tokens are the
    most likely ones, which is how the trainer reads a count (``nucleus_logprob``). A greedy
    request's row holds the placeholders' bias (``BANNED_LOGIT_BIAS``); each placeholder gets its
    mass back, ``exp(row + 100)``, and the logprob is renormalised, so it is ``log_softmax(z)``
    with the placeholders in, as the embedded engine reports.
    """
    biased = banned if request.sampling.temperature == 0 else []
    whole = SAMPLING_NUCLEUS in sampled_fields(request.sampling)  # a row of every id that is the nucleus
    token_ids = np.asarray(rows.token_ids, dtype=np.int64)
    values = np.asarray(rows.logprobs, dtype=np.float64)
    logprobs, nucleus = np.empty(len(ids), dtype=np.float32), []
    for i, token in enumerate(ids):
        start, end = rows.start_indices[i], rows.end_indices[i]
        row_ids, row = token_ids[start + 1 : end], values[start + 1 : end]
        if token_ids[start] != token or not np.isfinite(values[start]):
            raise RuntimeError(
                f"request {request.request_id}: vLLM's logprobs at position {i} are not those of the sampled"
                f" token {token} (got id {token_ids[start]}, logprob {values[start]})"
            )
        kept = np.isfinite(row)
        placeholders = row[kept & np.isin(row_ids, biased)]
        regained = np.exp(placeholders - BANNED_LOGIT_BIAS).sum() - np.exp(placeholders).sum()
        logprobs[i] = values[start] - np.log1p(regained)
        nucleus.append(int(kept.sum()) if whole else 0)
    return logprobs, nucleus


def redraw(
    request: GenerateRequest, prompt: np.ndarray, result: GenerateResult, banned: Sequence[int], attempt: int
) -> tuple[GenerateRequest, np.ndarray, GenerateResult] | None:
    """Where a sampled request's reply ends in a vision placeholder (``sampling_kwargs`` stops it
    there), the request that draws that position again and the reply before it: (request, its
    prompt, the result so far); None when the reply does not end in one.

    Drawing again until the draw is no placeholder samples the nucleus restricted to the other
    tokens, as the embedded engine's sampler does, while each logprob and nucleus count stays of
    the whole distribution (placeholders in), as it reports them. The next request is the prompt
    plus the kept tokens, with the tokens left to generate, on the same policy version (the
    caller holds it) and, for a seeded request, the seed moved by ``attempt`` (replayable)."""
    if request.sampling.temperature == 0 or not len(result.token_ids) or int(result.token_ids[-1]) not in banned:
        return None
    if attempt > MAX_REDRAWS:
        raise RuntimeError(
            f"request {request.request_id}: vLLM drew a vision placeholder {attempt} times (at most {MAX_REDRAWS}"
            " are drawn again); the policy puts most of its reply's mass on them"
        )
    kept = result.token_ids[:-1]
    sampling = dataclasses.replace(
        request.sampling,
        max_tokens=request.sampling.max_tokens - len(kept),
        seed=None if request.sampling.seed is None else (request.sampling.seed + attempt * 0x9E3779B97F4A7C15) % SEED_LIMIT,
    )
    again = np.concatenate([prompt, kept.astype(prompt.dtype)])
    so_far = dataclasses.replace(
        result,
        token_ids=kept,
        logprobs=result.logprobs[:-1],
        extras={name: values[:-1] for name, values in result.extras.items()},
    )
    return dataclasses.replace(request, prompt_ids=again, sampling=sampling), again, so_far


def joined(first: GenerateResult, rest: GenerateResult) -> GenerateResult:
    """One reply from ``first``'s tokens and then ``rest``'s (a redraw's), its prompt work summed."""
    return dataclasses.replace(
        rest,
        request_id=first.request_id,
        token_ids=np.concatenate([first.token_ids, rest.token_ids]),
        logprobs=np.concatenate([first.logprobs, rest.logprobs]),
        extras={name: np.concatenate([first.extras[name], values]) for name, values in rest.extras.items()},
        prefill_tokens=first.prefill_tokens + rest.prefill_tokens,
        reused_prefix_tokens=first.reused_prefix_tokens + rest.reused_prefix_tokens,
    )


def score_result(request: GenerateRequest, prompt: np.ndarray, output: Any, version: int) -> ScoreResult:
    """vLLM's prompt logprobs as a ``ScoreResult``: ``log p(ids[t] | ids[:t])`` for t >= 1, 0 at t = 0
    (vLLM's entry there is None: nothing precedes the first token)."""
    check_expansion(request, prompt, output.prompt_token_ids)
    entries = output.prompt_logprobs
    logprobs = np.zeros(len(prompt), dtype=np.float32)
    for t in range(1, len(prompt)):
        logprobs[t] = entries[t][int(prompt[t])].logprob
    return ScoreResult(request.request_id, logprobs, version)


def checkpoint_weights(
    state_dict: Mapping[str, torch.Tensor | np.ndarray], dtype: torch.dtype | None, family: ModelFamily | None = None
) -> dict[str, torch.Tensor]:
    """A trainer's full state dict as (name -> contiguous CPU tensor) for vLLM's ``load_weights``.

    The trainer names weights as the Hugging Face checkpoint does, which is what vLLM's model classes
    ``load_weights`` maps to its own modules (q/k/v and gate/up fused, shards cut per TP rank);
    every name is checked here so a wrong one fails before the engine is touched. Floating
    weights are cast to the engine's ``dtype`` (half the bytes to stage when training in fp32;
    None keeps them as they are). Tensors sharing storage (tied embeddings) are copied apart:
    safetensors stores each name's bytes once. ``family``: the served model's, whose
    ``checkpoint_tensor`` puts a weight kept in another layout in memory (Qwen3-VL-MoE's fused
    experts) into the checkpoint file's, which ``load_weights`` reads.
    """
    plugin = sorted(name for name in state_dict if name.startswith(PLUGIN_ENCODER_PREFIX))
    if plugin:
        raise ValueError(
            f"update_weights: {len(plugin)} weight(s) of a plug-in vision encoder, e.g. {plugin[0]!r}; the vLLM"
            " engine serves the checkpoint's own tower and cannot run a plug-in encoder (use EmbeddedEngine)"
        )
    unknown = sorted(name for name in state_dict if not name.startswith(CHECKPOINT_PREFIXES))
    if unknown:
        raise ValueError(
            f"update_weights: {len(unknown)} name(s) outside the checkpoint's weights, e.g. {unknown[:3]}; expected"
            f" names starting with one of {CHECKPOINT_PREFIXES}"
        )
    weights = {}
    storages = set()
    for name, value in state_dict.items():
        tensor = torch.from_numpy(np.array(value)) if isinstance(value, np.ndarray) else value.detach().cpu()
        if family is not None:
            tensor = family.checkpoint_tensor(name, tensor)
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        tensor = tensor.contiguous()
        if tensor.untyped_storage().data_ptr() in storages:
            tensor = tensor.clone()
        storages.add(tensor.untyped_storage().data_ptr())
        weights[name] = tensor
    return weights
