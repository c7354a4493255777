"""Batched prefill and decode of a vision-language model of any registered family (``vlrl.models``),
each row continuing its own cached prefix.

One batch = one prefill forward plus one forward per decode step. Rows differ in cached prefix
length ``c_i`` and in new prompt length ``n_i``; both are left-padded, so the key/value layout
of row ``i`` is ``[pad][prefix_i][pad][new_i]`` and then one slot per decode step::

    keys:  (B, kv_heads, C + N + steps, head_dim)   C = max c_i, N = max n_i
    mask:  (B, C + N + steps)                        1 on real tokens, 0 on pads

Pads are masked out of every attention, and a row's last prompt token sits in the last column,
so its logits are the batch's last position. Rows leave the batch when they finish.

A family with linear-attention layers (Qwen3.5: gated DeltaNet) keeps, per layer, a causal-conv
window and a recurrent state instead of keys and values. Zero left pads leave a zero state zero,
so fresh prompts still prefill as one batch; a carried state would decay through pads, so a row
continuing a prefix runs in a batch of its own, and only when its prompt extends the whole cached
sequence (the state stands for exactly those tokens and cannot be cut back).

Positions are the 3-D M-RoPE ids (temporal, height, width), computed explicitly for each
row with the model's own ``get_rope_index`` over the *whole* prompt (so a continued prefill gets
the positions a from-scratch prefill would); generated tokens continue at ``max + 1``. Passing
them explicitly also keeps the model's stateful ``rope_deltas`` out of the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPast

from encoders.protocol import VisionEncoder
from encoders.spec import STATE_PREFIX
from vlrl.models import family_of
from vlrl.models.adapters import MergedAdapters, split_push
from vlrl.records import EXTRA_PREFIX, ROUTED_EXPERTS
from vlrl.rollout.engine.images import ProcessedImage
from vlrl.rollout.engine.prefix import ImageSpan, KVPrefix
from vlrl.rollout.engine.routing import RoutingRecorder
from vlrl.rollout.engine.sampling import generator_for, sample, sampled_extras
from vlrl.rollout.protocol import SamplingParams

CACHE = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"
"""transformers' name for the KV cache in model calls and outputs: ``cache`` in the releases this
project installs, ``past_key_values`` in 5.19 (what vLLM's CPU build pins, in ``.venv-vllm``)."""


@dataclass(slots=True)
class Sequence:
    """One admitted request, everything resolved: what the runner computes."""

    prompt: np.ndarray
    """int64 (T,) prompt ids."""
    images: tuple[ProcessedImage, ...]
    spans: tuple[ImageSpan, ...]
    sampling: SamplingParams
    prefix: KVPrefix | None
    """The trajectory's cached prefix, if any; looked up when the batch starts."""
    keep_prefix: bool
    """Return this request's own prefix for the next turn."""


@dataclass(frozen=True, slots=True)
class Outcome:
    token_ids: np.ndarray
    logprobs: np.ndarray
    finish_reason: Literal["stop", "length"]
    prefill_tokens: int
    reused_prefix_tokens: int
    prefix: KVPrefix | None
    extras: dict[str, np.ndarray]
    """What the draws' distribution was beyond the logprobs (``sampling.sampled_extras``), and
    each sampled token's routing when recorded."""
    prompt_extras: dict[str, np.ndarray] = field(default_factory=dict)
    """The routing of the prompt tokens this request prefilled, when recorded."""


@dataclass(slots=True)
class _Row:
    seq: Sequence
    reused: int
    positions: torch.Tensor  # (3, T - reused) M-RoPE ids of the tokens to prefill
    next_position: int
    generator: torch.Generator | None
    stop_ids: frozenset[int]
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    nucleus: list[int] = field(default_factory=list)
    prompt_routing: np.ndarray | None = None  # (new prompt tokens, layers, k) records, when recorded
    routing: list[np.ndarray] = field(default_factory=list)  # (layers, k) of each sampled token fed back
    finish: Literal["stop", "length"] | None = None
    outcome: Outcome | None = None


class ModelRunner:
    """Owns the model (and a plug-in encoder that replaces its tower, if any); ``run`` and
    ``load_weights`` are blocking and belong on one compute thread. With ``record_routing`` (a
    mixture-of-experts model) every outcome carries its tokens' routing (``records.ROUTED_EXPERTS``)."""

    def __init__(
        self,
        model: PreTrainedModel,
        stop_token_ids: frozenset[int],
        encoder: VisionEncoder | None = None,
        *,
        record_routing: bool = False,
    ) -> None:
        self.model = model.eval()
        self._routing = RoutingRecorder(model.model.language_model) if record_routing else None
        self.encoder = encoder.eval() if encoder is not None else None
        self._stop_token_ids = stop_token_ids
        self._adapters = MergedAdapters()
        self._image_token_id = model.config.image_token_id
        self._device = model.device
        placeholders = [
            getattr(model.config, name, None)
            for name in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
        ]
        self._banned = torch.tensor([i for i in placeholders if i is not None], dtype=torch.long, device=self._device)
        layer_types = getattr(model.config.get_text_config(), "layer_types", None) or ()
        self._recurrent = "linear_attention" in layer_types

    @classmethod
    def load(
        cls,
        path: str,
        *,
        dtype: torch.dtype,
        device: str,
        stop_token_ids: frozenset[int],
        encoder: VisionEncoder | None = None,
        record_routing: bool = False,
    ) -> ModelRunner:
        model = family_of(path).load(path, dtype=dtype).to(device)
        plug_in = encoder.to(device=device, dtype=dtype) if encoder is not None else None
        return cls(model, stop_token_ids, plug_in, record_routing=record_routing)

    @torch.inference_mode()
    def run(self, seqs: list[Sequence]) -> list[Outcome]:
        rows = [self._plan(seq) for seq in seqs]
        if not self._recurrent:
            self._run_batch(rows)
        else:  # fresh rows together, each row carrying a recurrent state alone (module docstring)
            batches = [[r for r in rows if not r.reused], *([r] for r in rows if r.reused)]
            for batch in batches:
                if batch:
                    self._run_batch(batch)
        return [row.outcome for row in rows]

    def _run_batch(self, rows: list[_Row]) -> None:
        cache, mask, logits = self._prefill(rows)
        if self._routing is not None:
            records = self._routing.take(len(rows))  # (B, N, layers, k), new tokens left-padded to N
            for row, row_records in zip(rows, records):
                row.prompt_routing = row_records[len(row_records) - (len(row.seq.prompt) - row.reused) :]
        active = rows
        while True:
            ids, logprobs, nucleus = sample(
                logits, [r.seq.sampling for r in active], [r.generator for r in active], self._banned
            )
            for row, token, logprob, kept in zip(active, ids.tolist(), logprobs.tolist(), nucleus):
                row.token_ids.append(token)
                row.logprobs.append(logprob)
                row.nucleus.append(kept)
                if token in row.stop_ids:
                    row.finish = "stop"
                elif len(row.token_ids) >= row.seq.sampling.max_tokens:
                    row.finish = "length"
            for j, row in enumerate(active):
                if row.finish is not None:
                    row.outcome = self._outcome(row, cache, mask[j], j)
            keep = [j for j, row in enumerate(active) if row.finish is None]
            if not keep:
                return
            if len(keep) < len(active):
                index = torch.tensor(keep, device=self._device)
                for layer in cache.layers:
                    if _is_recurrent(layer):
                        layer.reorder_cache(index)  # transformers' linear-attention layers select rows so
                    else:
                        layer.batch_select_indices(index)
                mask, ids = mask[index], ids[index]
                active = [active[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)
            positions = torch.tensor([r.next_position for r in active], device=self._device)
            positions = positions.view(1, -1, 1).expand(3, -1, 1)  # (3, B, 1): text tokens share all three ids
            for row in active:
                row.next_position += 1
            out = self.model(
                input_ids=ids[:, None], position_ids=positions, attention_mask=mask, use_cache=True, **{CACHE: cache}
            )
            logits = out.logits[:, -1]
            if self._routing is not None:
                for row, row_records in zip(active, self._routing.take(len(active))):  # (1, layers, k) each
                    row.routing.append(row_records[0])

    @torch.inference_mode()
    def score(self, prompt: np.ndarray, images: tuple[ProcessedImage, ...]) -> np.ndarray:
        """``log p(prompt[t] | prompt[:t])`` for t >= 1 (0 at t = 0): one forward of the whole
        sequence, images included, as a teacher scores a trajectory."""
        ids = torch.as_tensor(prompt, dtype=torch.long, device=self._device)  # (T,)
        features = self._image_features(images)
        embeds = self._embed(ids, features)  # (T, H)
        positions = self._positions(prompt, images).to(self._device)[:, None]  # (3, 1, T)
        deepstack = _deepstack(features, embeds.shape[-1])
        logits, _ = self._forward(embeds[None], positions, deepstack, (ids == self._image_token_id)[None])
        logits = logits[0].float()  # (T, V)
        picked = torch.log_softmax(logits[:-1], dim=-1).gather(1, ids[1:, None])[:, 0]  # (T - 1,)
        return np.concatenate([[0.0], picked.cpu().numpy()]).astype(np.float32)

    def load_weights(self, state_dict: Mapping[str, torch.Tensor | np.ndarray]) -> None:
        """Copy ``state_dict`` (any subset of the model's, the plug-in encoder's under ``encoder.``)
        into the weights, after checking all of it; LoRA pairs in it are merged into their
        modules' weights (``vlrl.models.adapters``)."""
        state_dict, pairs = split_push(state_dict)
        targets = self.model.state_dict(keep_vars=True)
        if self.encoder is not None:
            targets.update({STATE_PREFIX + name: value for name, value in self.encoder.state_dict(keep_vars=True).items()})
        unknown = sorted(set(state_dict) - set(targets))
        if unknown:
            raise ValueError(
                f"update_weights: {len(unknown)} unknown name(s), e.g. {unknown[:3]}; expected names"
                f" of the model's state_dict such as {next(iter(targets))!r}"
            )
        tensors = {name: _as_tensor(value) for name, value in state_dict.items()}
        for name, tensor in tensors.items():
            if tuple(tensor.shape) != tuple(targets[name].shape):
                raise ValueError(
                    f"update_weights: {name} has shape {tuple(tensor.shape)}; the model's is"
                    f" {tuple(targets[name].shape)}"
                )
        with torch.no_grad():
            for name, tensor in tensors.items():
                targets[name].copy_(tensor)
        rebased = {module for module in pairs if module + ".weight" in tensors}
        self._adapters.apply(targets, pairs, rebased)

    def _plan(self, seq: Sequence) -> _Row:
        reused = seq.prefix.shared_length(seq.prompt, seq.spans) if seq.prefix is not None else 0
        if self._recurrent and seq.prefix is not None and reused < len(seq.prefix.tokens):
            reused = 0  # a recurrent state cannot be cut back to a shorter prefix
        positions = self._positions(seq.prompt, seq.images)
        return _Row(
            seq=seq,
            reused=reused,
            positions=positions[:, reused:],
            next_position=int(positions.max()) + 1,
            generator=generator_for(seq.sampling, self._device),
            stop_ids=self._stop_token_ids | frozenset(seq.sampling.stop_token_ids),
        )

    def _prefill(self, rows: list[_Row]) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
        """Run the prompts' uncached tokens; return the cache, the mask and last-position logits (B, V)."""
        new_ids, features = self._prompt_inputs(rows)
        embeds = [self._embed(ids, row_features) for ids, row_features in zip(new_ids, features)]
        cached = max(r.reused for r in rows)
        width = max(len(e) for e in embeds)
        hidden = embeds[0].shape[-1]
        inputs = embeds[0].new_zeros(len(rows), width, hidden)
        positions = torch.zeros(3, len(rows), width, dtype=torch.long, device=self._device)
        mask = torch.zeros(len(rows), cached + width, dtype=torch.long, device=self._device)
        visual = torch.zeros(len(rows), width, dtype=torch.bool, device=self._device)  # new image tokens only
        for i, (row, row_embeds, ids) in enumerate(zip(rows, embeds, new_ids)):
            n = len(row_embeds)
            inputs[i, width - n :] = row_embeds
            positions[:, i, width - n :] = row.positions
            mask[i, cached - row.reused : cached] = 1
            mask[i, cached + width - n :] = 1
            visual[i, width - n :] = ids == self._image_token_id
        deepstack = _deepstack([f for row_features in features for f in row_features], hidden)  # row-major, as visual
        logits, cache = self._forward(
            inputs,
            positions,
            deepstack,
            visual,
            attention_mask=mask,
            use_cache=True,
            **{CACHE: self._prefix_cache(rows, cached)},
            logits_to_keep=1,
        )
        return cache, mask, logits[:, -1]

    def _forward(
        self, embeds: torch.Tensor, positions: torch.Tensor, deepstack: list[torch.Tensor], visual: torch.Tensor, **kwargs
    ) -> tuple[torch.Tensor, DynamicCache | None]:
        """Logits ``(B, kept, V)`` and cache of one forward of input embeddings ``(B, N, H)``.

        Without DeepStack levels this is the model's own forward. With them (Qwen3-VL) the language
        model runs directly and adds level ``k`` ``(sum image tokens, H)`` at ``visual`` ``(B, N)``,
        the image tokens among these *new* tokens, right after decoder layer ``k``: cached prefix
        tokens already hold their additions in the KV cache, and decode steps have no images."""
        if not deepstack:
            out = self.model(inputs_embeds=embeds, position_ids=positions, **kwargs)
            return out.logits, getattr(out, CACHE)
        keep = kwargs.pop("logits_to_keep", 0)  # 0 keeps every position, as in the model's forward
        out = self.model.model.language_model(
            inputs_embeds=embeds, position_ids=positions, visual_pos_masks=visual, deepstack_visual_embeds=deepstack, **kwargs
        )
        return self.model.lm_head(out.last_hidden_state[:, -keep:]), getattr(out, CACHE)

    def _positions(self, prompt: np.ndarray, images: tuple[ProcessedImage, ...]) -> torch.Tensor:
        """``(3, T)`` M-RoPE ids of the whole prompt, images on their patch-rule grids."""
        ids = torch.from_numpy(prompt)[None]  # (1, T)
        grids = torch.tensor([image.grid_thw for image in images]) if images else None
        positions, _ = self.model.model.get_rope_index(
            ids, mm_token_type_ids=(ids == self._image_token_id).int(), image_grid_thw=grids
        )  # (3, 1, T)
        return positions[:, 0]

    def _prompt_inputs(self, rows: list[_Row]) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
        """Each row's uncached token ids ``(n_i,)`` and the features of its uncached images, all
        images encoded in one call."""
        new_images = [
            (i, image)
            for i, row in enumerate(rows)
            for image, span in zip(row.seq.images, row.seq.spans)
            if span.start >= row.reused
        ]
        per_row: list[list[torch.Tensor]] = [[] for _ in rows]
        for (i, _), feature in zip(new_images, self._image_features([image for _, image in new_images])):
            per_row[i].append(feature)
        return [torch.from_numpy(row.seq.prompt[row.reused :]).to(self._device) for row in rows], per_row

    def _image_features(self, images: list[ProcessedImage] | tuple[ProcessedImage, ...]) -> list[torch.Tensor]:
        """One ``(num_tokens, hidden * levels)`` feature per image, all encoded in one call: by the
        plug-in encoder as the trainer runs it, else by the model's tower (attending within each
        image; Qwen3-VL's also gives its DeepStack levels, put beside the merged rows)."""
        if not images:
            return []
        if self.encoder is not None:
            batch = self.encoder.collate([image.input for image in images])
            batch = replace(batch, pixel_values=batch.pixel_values.to(self._device), grid_thw=batch.grid_thw.to(self._device))
            return list(self.encoder(batch).split(batch.num_tokens))
        pixels = torch.cat([image.pixel_values for image in images]).to(self._device)
        grids = torch.tensor([image.grid_thw for image in images], device=self._device)
        out = self.model.model.get_image_features(pixels, grids)
        levels = getattr(out, "deepstack_features", None)
        if not levels:
            return list(out.pooler_output)
        return [torch.cat(image, dim=1) for image in zip(out.pooler_output, *levels, strict=True)]

    def _embed(self, ids: torch.Tensor, features: list[torch.Tensor]) -> torch.Tensor:
        """``(len(ids), hidden)`` input embeddings with ``features``' first ``hidden`` columns (the
        spliced level; DeepStack levels follow) at the image tokens, in order."""
        embeds = self.model.get_input_embeddings()(ids)
        if features:
            embeds[ids == self._image_token_id] = torch.cat(features)[:, : embeds.shape[-1]].to(embeds.dtype)
        return embeds

    def _prefix_cache(self, rows: list[_Row], cached: int) -> DynamicCache:
        """The rows' cached prefixes, right-aligned into one (B, kv_heads, cached, head_dim) per layer."""
        if self._recurrent:
            return self._recurrent_cache(rows, cached)
        if cached == 0:
            return DynamicCache()
        template = next(r.seq.prefix.kv for r in rows if r.reused)
        layers = []
        for layer, (k0, v0) in enumerate(template):
            keys = k0.new_zeros(len(rows), k0.shape[0], cached, k0.shape[2])
            values = v0.new_zeros(len(rows), v0.shape[0], cached, v0.shape[2])
            for i, row in enumerate(rows):
                if row.reused:
                    k, v = row.seq.prefix.kv[layer]
                    keys[i, :, cached - row.reused :] = k[:, : row.reused]
                    values[i, :, cached - row.reused :] = v[:, : row.reused]
            layers.append((keys, values))
        return DynamicCache(ddp_cache_data=layers)

    def _recurrent_cache(self, rows: list[_Row], cached: int) -> DynamicCache:
        """A hybrid model's cache: empty, or the one row's whole prefix (``run`` batches a row that
        reuses a prefix alone): keys and values of the attention layers, the conv window and
        recurrent state of the linear-attention layers."""
        cache = DynamicCache(config=self.model.config)
        if cached == 0:
            return cache
        (row,) = rows
        for index, (layer, (first, second)) in enumerate(zip(cache.layers, row.seq.prefix.kv, strict=True)):
            if not _is_recurrent(layer):
                cache.update(first[None], second[None], index)
                continue
            layer.update_conv_state(first[None].clone(), conv_kernel_size=first.shape[-1])
            layer.update_recurrent_state(second[None].clone())
            layer.cumulative_length_linear.fill_(cached)
        return cache

    def _outcome(self, row: _Row, cache: DynamicCache, mask_row: torch.Tensor, j: int) -> Outcome:
        prefix = None
        if row.seq.keep_prefix:
            # The cache holds the prompt and all sampled tokens but the last (never fed back).
            tokens = np.concatenate([row.seq.prompt, np.asarray(row.token_ids[:-1], dtype=np.int64)])
            real = mask_row.nonzero()[:, 0]
            assert len(real) == len(tokens), (len(real), len(tokens))
            prefix = KVPrefix(
                tokens=tokens,
                images=row.seq.spans,
                kv=tuple(
                    (layer.conv_states[0][j].clone(), layer.recurrent_states[0][j].clone())
                    if _is_recurrent(layer)
                    else (layer.keys[j][:, real], layer.values[j][:, real])
                    for layer in cache.layers
                ),
            )
        return Outcome(
            token_ids=np.asarray(row.token_ids, dtype=np.int32),
            logprobs=np.asarray(row.logprobs, dtype=np.float32),
            finish_reason=row.finish,
            prefill_tokens=len(row.seq.prompt) - row.reused,
            reused_prefix_tokens=row.reused,
            prefix=prefix,
            extras={**sampled_extras(row.seq.sampling, row.nucleus), **self._sampled_routing(row)},
            prompt_extras={} if self._routing is None else {_ROUTED: row.prompt_routing},
        )

    def _sampled_routing(self, row: _Row) -> dict[str, np.ndarray]:
        """Each sampled token's routing; zeros (no record) for the last, which no decode step fed back."""
        if self._routing is None:
            return {}
        records = np.zeros((len(row.token_ids), *row.prompt_routing.shape[1:]), row.prompt_routing.dtype)
        if row.routing:
            records[: len(row.routing)] = np.stack(row.routing)
        return {_ROUTED: records}


_ROUTED = ROUTED_EXPERTS.removeprefix(EXTRA_PREFIX)
"""The routing's name in an outcome's extras (the trajectory adds the prefix)."""


def _is_recurrent(layer: object) -> bool:
    """Whether a cache layer holds a linear-attention layer's conv window and recurrent state."""
    return hasattr(layer, "recurrent_states")


def _deepstack(features: list[torch.Tensor], hidden: int) -> list[torch.Tensor]:
    """The DeepStack levels of image ``features`` (columns past the first ``hidden``), each
    ``(sum tokens, hidden)`` over the images in order; none when the rows are ``hidden`` wide."""
    if not features or features[0].shape[1] == hidden:
        return []
    return list(torch.cat(features)[:, hidden:].split(hidden, dim=1))


def _as_tensor(value: torch.Tensor | np.ndarray) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    # Ray hands out read-only arrays, which torch.from_numpy warns about; copy those.
    return torch.from_numpy(value if value.flags.writeable else value.copy())
