"""A plain Hugging Face forward of a stored sequence: the reference the engine's and teacher's
logprobs are checked against."""

from __future__ import annotations

import numpy as np
import torch

from vlrl.mm.image_rows import read_images
from vlrl.records import SeqMeta


def reference_logprobs(model, processor, store, meta: SeqMeta) -> np.ndarray:
    """``log p(ids[t] | ids[:t])`` for t >= 1 of ``meta``'s stored sequence, images included: (T - 1,)."""
    ids_array = store.get([meta.key], ["token_ids"])[meta.key]["token_ids"]
    return sequence_logprobs(model, processor, np.array(ids_array), stored_images(store, meta))


def stored_images(store, meta: SeqMeta) -> list[np.ndarray]:
    """``meta``'s stored images, in prompt order."""
    pixels = read_images(store, [m.store_key for m in meta.images])
    return [np.array(pixels[meta.images[index].store_key]) for _, index in meta.image_offsets]


def sequence_logprobs(model, processor, token_ids, images) -> np.ndarray:
    """``log p(ids[t] | ids[:t])`` for t >= 1 of ``token_ids`` (image pads expanded) with
    ``images`` (HWC uint8 arrays, in prompt order): (T - 1,)."""
    ids = torch.as_tensor(np.asarray(token_ids), dtype=torch.long)
    logits = sequence_logits(model, processor, token_ids, images)
    return torch.log_softmax(logits[:-1], -1).gather(1, ids[1:, None])[:, 0].numpy()


def sequence_logits(model, processor, token_ids, images) -> torch.Tensor:
    """The float32 logits ``(T, V)`` of ``token_ids`` with ``images``, as ``sequence_logprobs`` reads them."""
    ids = torch.as_tensor(np.asarray(token_ids), dtype=torch.long)[None]  # (1, T)
    vision = {}
    if len(images):
        processed = processor.image_processor(images=list(images), return_tensors="pt")
        vision = {
            "pixel_values": processed["pixel_values"],
            "image_grid_thw": processed["image_grid_thw"],
            "mm_token_type_ids": (ids == model.config.image_token_id).int(),
        }
    with torch.no_grad():
        return model(input_ids=ids, **vision).logits[0].float()  # (T, V)
