"""Requests as an Agent Loop would send them: Qwen chat turns, image pads expanded by the processor."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import Qwen2VLForConditionalGeneration

from vlrl.mm import content_hash
from vlrl.rollout.client import ContextImage
from vlrl.rollout.engine import EmbeddedEngine, EngineCore
from vlrl.rollout.protocol import GenerateRequest, ImagePart, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
_request_ids = itertools.count()


def screen(width: int, height: int, seed: int) -> np.ndarray:
    """A deterministic canonical screenshot: flat panels plus noise, like a noisy GUI."""
    rng = np.random.default_rng(seed)
    pixels = np.full((height, width, 3), rng.integers(0, 256, 3), dtype=np.uint8)
    pixels[height // 4 : height // 2, width // 4 : width // 2] = rng.integers(0, 256, 3)
    pixels ^= rng.integers(0, 32, pixels.shape, dtype=np.uint8)
    return pixels


def gui_screens(n: int, seed: int = 2) -> list[ContextImage]:
    """Screens as a GUI's are (320x240): one base, each turn changing one small region of the last."""
    rng = np.random.default_rng(seed)
    pixels = np.repeat(rng.integers(0, 256, (30, 40, 3), dtype=np.uint8), 8, axis=0).repeat(8, axis=1)
    screens = []
    for turn in range(n):
        pixels = pixels.copy()
        pixels[100 : 100 + 12, 40 + 10 * turn : 48 + 10 * turn] = 255 - 20 * turn
        screens.append(ContextImage.of(pixels))
    return screens


def part(pixels: np.ndarray, *, send: bool = True) -> ImagePart:
    height, width = pixels.shape[:2]
    return ImagePart(content_hash(pixels), width, height, pixels if send else None)


def turn_text(text: str, n_images: int, *, first: bool = True) -> str:
    """One user turn (after the system turn when ``first``), ready for the assistant's answer."""
    chat = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" if first else "\n"
    chat += "<|im_start|>user\n" + "<|vision_start|><|image_pad|><|vision_end|>" * n_images + text
    return chat + "<|im_end|>\n<|im_start|>assistant\n"


def user_turn(processor: Any, text: str, images: list[np.ndarray], *, first: bool = True) -> np.ndarray:
    """Prompt ids of ``turn_text``, each image's pad expanded to its token count by the processor."""
    chat = turn_text(text, len(images), first=first)
    encoded = processor(text=[chat], images=images or None, return_tensors="np")
    return encoded["input_ids"][0].astype(np.int32)


def request(
    prompt: np.ndarray,
    images: tuple[ImagePart, ...] = (),
    *,
    trajectory: str | None = None,
    sampling: SamplingParams = GREEDY,
) -> GenerateRequest:
    n = next(_request_ids)
    return GenerateRequest(f"req-{n}", trajectory or f"traj-{n}", prompt, images, sampling)


def run_core(path: Path, body: Callable[[EngineCore], Awaitable[Any]], **config: Any) -> Any:
    """Run ``body(core)`` on a fresh in-process engine inside its own event loop."""

    async def main() -> Any:
        core = EngineCore(EmbeddedEngine.Config(**config), str(path))
        try:
            return await body(core)
        finally:
            await core.close()

    return asyncio.run(main())


def mixed_requests(processor: Any, n: int = 8) -> list[GenerateRequest]:
    """Different prompt lengths, image counts (0-2) and image sizes."""
    shots = [screen(320, 240, 1), screen(200, 150, 2), screen(640, 360, 3)]
    out = []
    for i in range(n):
        images = shots[i % 3 : i % 3 + i % 3]
        prompt = user_turn(processor, "click the OK button " * (1 + i % 4), images)
        out.append(request(prompt, tuple(part(p) for p in images)))
    return out


def policy_logprobs(tiny_path, processor, prompt, shot, generated, update=None) -> torch.Tensor:
    """log_softmax (temperature 1) of a plain forward of prompt + generated: (len(generated), V)."""
    model = Qwen2VLForConditionalGeneration.from_pretrained(tiny_path).eval()
    if update is not None:
        model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in update.items()}, strict=False)
    return forward_log_softmax(model, processor, prompt, generated, [shot])


def forward_log_softmax(model, processor, prompt, generated, shots) -> torch.Tensor:
    """log_softmax of ``model``'s forward of prompt + generated at the generated positions: (len(generated), V)."""
    ids = torch.from_numpy(np.concatenate([prompt, generated]).astype(np.int64))[None]
    images = processor.image_processor(images=shots, return_tensors="pt")
    with torch.inference_mode():
        logits = model(
            input_ids=ids,
            pixel_values=images["pixel_values"],
            image_grid_thw=images["image_grid_thw"],
            mm_token_type_ids=(ids == model.config.image_token_id).int(),
        ).logits[0]
    return torch.log_softmax(logits[len(prompt) - 1 : -1].float(), dim=-1)


def model_state(tiny_path) -> dict[str, torch.Tensor]:
    """The names a trainer's copy of the model uses (the checkpoint's own layout differs)."""
    return Qwen2VLForConditionalGeneration.from_pretrained(tiny_path).state_dict()


def perturbed(tiny_path, scale: float = 0.05) -> dict[str, np.ndarray]:
    """New values for the LM head and the vision merger, as read-only numpy arrays (as Ray delivers)."""
    weights = model_state(tiny_path)
    generator = torch.Generator().manual_seed(0)
    update = {}
    for name in ("lm_head.weight", "model.visual.merger.mlp.0.weight"):
        value = weights[name] + scale * torch.randn(weights[name].shape, generator=generator)
        update[name] = value.numpy()
        update[name].flags.writeable = False
    return update
