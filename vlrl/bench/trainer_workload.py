"""A small packed multi-turn VLM batch for the trainer's parallel tests and measurements
(``scripts/expert_parallel.py``), on any tiny build.

Sequences look like GUI-agent trajectories: text, ``<|vision_start|>`` + image tokens +
``<|vision_end|>``, more text, a second screenshot (group members share the first one), a
response. Rollout logprobs are the model's own (a plain float64 Hugging Face forward of each
sequence on its own) plus noise, so ratios sit near 1 and most tokens carry gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import AutoProcessor

from vlrl.mm import patch_rule_of, store_image
from vlrl.models import family_of
from vlrl.records import ADVANTAGES, LOGPROBS, LOSS_MASK, TOKEN_IDS, SeqMeta
from vlrl.store import LocalStore, PayloadStore

SIZES = [(56, 84), (112, 112), (84, 168), (140, 56)]


@dataclass
class Workload:
    metas: list[SeqMeta]
    rows: dict[str, dict[str, np.ndarray]]
    images: dict[str, np.ndarray]  # store key -> pixels

    def store(self, store: PayloadStore | None = None) -> PayloadStore:
        """``store`` (a fresh ``LocalStore`` by default) holding every image and row."""
        store = LocalStore() if store is None else store
        for pixels in self.images.values():
            store_image(store, pixels, holder="workload")
        for key, fields in self.rows.items():
            store.put(key, fields)
        return store


def make_workload(model_path, *, groups: int = 2, members: int = 3, seed: int = 0) -> Workload:
    processor = AutoProcessor.from_pretrained(model_path)
    model = family_of(model_path).load(model_path, dtype=torch.float64)
    rule = patch_rule_of(processor)
    tok = processor.tokenizer.convert_tokens_to_ids
    image_id, start_id, end_id = tok("<|image_pad|>"), tok("<|vision_start|>"), tok("<|vision_end|>")
    rng = np.random.default_rng(seed)
    scratch = LocalStore()
    images: dict[str, np.ndarray] = {}

    def screenshot(k: int):
        h, w = SIZES[k % len(SIZES)]
        pixels = np.random.default_rng(500 + k).integers(0, 256, (h, w, 3), dtype=np.uint8)
        meta = store_image(scratch, pixels, holder="workload", rule=rule)
        images[meta.store_key] = pixels
        return meta

    metas, rows = [], {}
    for g in range(groups):
        first = screenshot(10 * g)
        for m in range(members):
            shots = [first, screenshot(10 * g + 1 + m)]
            ids, offsets = [], []
            for index, shot in enumerate(shots):
                ids += rng.integers(20, 200, int(rng.integers(3, 9))).tolist() + [start_id]
                offsets.append((len(ids), index))
                ids += [image_id] * shot.num_tokens + [end_id]
            prompt = len(ids)
            ids += rng.integers(20, 200, int(rng.integers(6, 20))).tolist()
            tokens = np.array(ids, np.int32)
            mask = np.zeros(len(ids), bool)
            mask[prompt:] = True
            key = f"train/g{g}m{m}"
            logprobs = reference_token_logprobs(model, processor, tokens, [images[s.store_key] for s in shots])
            rows[key] = {
                TOKEN_IDS: tokens,
                LOGPROBS: np.where(mask, logprobs + rng.normal(0, 0.05, len(ids)), 0).astype(np.float32),
                LOSS_MASK: mask,
                ADVANTAGES: np.where(mask, rng.normal(0, 1), 0).astype(np.float32),
            }
            metas.append(SeqMeta(
                key=key, num_tokens=len(ids), group_id=f"g{g}", source="desktop", sample_index=m, reward=0.0,
                success=False, finish="done", turns=2, num_response_tokens=int(mask.sum()),
                context_lengths=(len(ids),), policy_version=0, images=tuple(shots), image_offsets=tuple(offsets),
            ))  # fmt: skip
    return Workload(metas, rows, images)


def vision_inputs(model, processor, tokens: np.ndarray, pixels: list[np.ndarray]) -> dict:
    """One sequence's forward inputs for a Hugging Face model: ``tokens`` and its images' pixels."""
    ids = torch.as_tensor(tokens, dtype=torch.long)[None]
    processed = processor.image_processor(images=pixels, return_tensors="pt")
    return {
        "input_ids": ids,
        "pixel_values": processed["pixel_values"].to(model.dtype),
        "image_grid_thw": processed["image_grid_thw"],
        "mm_token_type_ids": (ids == model.config.image_token_id).int(),
    }


def reference_token_logprobs(model, processor, tokens: np.ndarray, pixels: list[np.ndarray]) -> np.ndarray:
    """``log p(token t | tokens < t)`` with 0 at t = 0: ``(T,)``, as the rollout records them."""
    with torch.no_grad():
        logits = model(**vision_inputs(model, processor, tokens, pixels)).logits[0]
    out = torch.log_softmax(logits[:-1].double(), -1).gather(1, torch.as_tensor(tokens[1:], dtype=torch.long)[:, None])[:, 0]
    return np.concatenate([[0.0], out.numpy()])


