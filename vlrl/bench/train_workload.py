"""What ``vlrl bench train`` trains: the model it builds and one step's packed GUI trajectories.

A step costs what its longest sequences cost (attention is quadratic in length), so the batch
has the lengths a GUI agent's multi-turn trajectories reach: each trajectory gets a token target
on a geometric ladder from ``min_tokens`` to ``max_tokens`` (both ends always present, the order
shuffled by seed) and takes turns until the next one would pass it. A turn is::

    observation text, <|vision_start|> + the screenshot's image tokens + <|vision_end|>, response

with the loss mask on the responses, the whole screenshot history kept in the sequence, as an
agent's prompt holds it. A trajectory runs on one device (desktop 1920x1080, laptop 1440x900,
browser 1280x720, phone 1080x2400) whose screenshots are stored at ``1 / screen_scale`` of the
side, as a harness downscales them; their image tokens follow the model's patch rule (at half
the side 300-820 tokens a screenshot, so 16k tokens are ~25 turns; at a third 135-380, ~60 turns). Members of a group
share their device and their first screenshot (the task's start screen, stored once). Rollout
logprobs sit near the random model's ``-log V`` so the ratios are near 1; advantages are the
group-normalised rewards. Same spec and model, same rows, images and metadata.

Model (``build_model``): the tiny model's tokenizer (``vlrl.models.build_tiny``) and a processor
with Qwen2-VL's own pixel bounds (at most 1280 tokens an image, where the tiny one caps at 64),
under a larger randomly initialised Qwen2-VL (``ModelSpec``), so layer compute, not Python
overhead, is most of a step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SCREENS: dict[str, tuple[int, int]] = {
    "desktop": (1920, 1080),
    "laptop": (1440, 900),
    "web": (1280, 720),
    "phone": (1080, 2400),
}
"""(width, height) of each device's screen."""
MAX_PIXELS = 28 * 28 * 1280
"""The bench processor's ``max_pixels``: Qwen2-VL's usual GUI-agent bound, 1280 tokens an image."""
MAX_POSITIONS = 32768
"""The bench model's ``max_position_embeddings``: room for the longest packed micro-batch."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The benchmarked Qwen2-VL: text stack and vision tower (random weights, seeded)."""

    hidden: int = 256
    intermediate: int = 1024
    layers: int = 4
    heads: int = 8
    kv_heads: int = 4
    vision_depth: int = 2
    vision_embed: int = 64
    vision_heads: int = 4
    seed: int = 0


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """One training step's batch."""

    groups: int
    members: int
    """Trajectories per group (one task, one start screen)."""
    min_tokens: int
    """The shortest trajectory's token target."""
    max_tokens: int
    """The longest trajectory's token target; a trajectory never exceeds its target."""
    micro_batch_tokens: int
    """``MicroBatchPlanner`` budget; at least ``max_tokens``."""
    screen_scale: int = 2
    """Screenshots are stored at ``1 / screen_scale`` of the device's side."""
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.min_tokens <= self.max_tokens <= self.micro_batch_tokens:
            raise ValueError(
                f"WorkloadSpec min_tokens={self.min_tokens}, max_tokens={self.max_tokens},"
                f" micro_batch_tokens={self.micro_batch_tokens}; expected 0 < min <= max <= micro_batch_tokens"
            )

    @property
    def sequences(self) -> int:
        return self.groups * self.members


def build_model(path: str | Path, spec: ModelSpec) -> Path:
    """The tiny model's tokenizer and a Qwen2-VL-bounded processor under a Qwen2-VL of ``spec``'s
    size, at ``path``."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.utils import logging

    from vlrl.models import build_tiny

    logging.disable_progress_bar()
    path = build_tiny("qwen2_vl", path, seed=spec.seed, max_pixels=MAX_PIXELS)
    tiny = Qwen2VLConfig.from_pretrained(path)
    text = tiny.text_config
    half = spec.hidden // spec.heads // 2  # M-RoPE sections (t, h, w) sum to head_dim / 2, as Qwen2-VL's 16/24/24
    sections = [half // 4, 3 * half // 8, half - half // 4 - 3 * half // 8]
    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=text.vocab_size, hidden_size=spec.hidden, intermediate_size=spec.intermediate,
            num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
            max_position_embeddings=MAX_POSITIONS,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": sections},
            bos_token_id=text.bos_token_id, eos_token_id=text.eos_token_id, pad_token_id=text.pad_token_id,
        ),
        vision_config=dict(
            depth=spec.vision_depth, embed_dim=spec.vision_embed, hidden_size=spec.hidden, num_heads=spec.vision_heads,
            mlp_ratio=2,
        ),
        image_token_id=tiny.image_token_id, video_token_id=tiny.video_token_id,
        vision_start_token_id=tiny.vision_start_token_id, vision_end_token_id=tiny.vision_end_token_id,
    )  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(spec.seed)
        model = Qwen2VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = text.eos_token_id
    model.generation_config.pad_token_id = text.pad_token_id
    model.save_pretrained(path)
    return path


def token_targets(spec: WorkloadSpec) -> list[int]:
    """Each trajectory's token target, in write order: the geometric ladder from ``min_tokens`` to
    ``max_tokens``, shuffled by seed."""
    ladder = np.geomspace(spec.min_tokens, spec.max_tokens, spec.sequences).round().astype(int)
    return np.random.default_rng((spec.seed, 1)).permutation(ladder).tolist()


def write_workload(store: Any, spec: WorkloadSpec, model_path: str | Path) -> list:
    """Write one step's trajectories and screenshots into ``store``; return their ``SeqMeta``s."""
    from transformers import AutoProcessor, Qwen2VLConfig

    from vlrl.mm import patch_rule_of, store_image
    from vlrl.records import ADVANTAGES, LOGPROBS, LOSS_MASK, TOKEN_IDS, SeqMeta

    config = Qwen2VLConfig.from_pretrained(model_path)
    rule = patch_rule_of(AutoProcessor.from_pretrained(model_path))
    vocab = config.text_config.vocab_size
    image_id, start_id, end_id = config.image_token_id, config.vision_start_token_id, config.vision_end_token_id
    low = max(image_id, start_id, end_id, config.video_token_id) + 1  # text tokens: no special ids
    rng = np.random.default_rng(spec.seed)
    devices = list(SCREENS)
    targets = iter(token_targets(spec))

    def screenshot(device: str, *key: int):
        width, height = (side // spec.screen_scale for side in SCREENS[device])
        pixels = np.random.default_rng((spec.seed, *key)).integers(0, 256, (height, width, 3), dtype=np.uint8)
        return store_image(store, pixels, holder="train-bench", rule=rule)

    metas = []
    for g in range(spec.groups):
        device = devices[g % len(devices)]
        first = screenshot(device, g, 0, 0)
        rewards = rng.random(spec.members)
        advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-6)  # GRPO: group-normalised
        for m in range(spec.members):
            target = next(targets)
            ids: list[int] = []
            mask: list[bool] = []
            shots, offsets, contexts = [], [], []
            while True:
                shot = first if not shots else screenshot(device, g, m + 1, len(shots))
                observation = rng.integers(low, vocab, int(rng.integers(10, 60))).tolist()  # task, UI text
                response = rng.integers(low, vocab, int(rng.integers(20, 80))).tolist()  # thought + tool call
                prompt = [*observation, start_id, *[image_id] * shot.num_tokens, end_id]
                if shots and len(ids) + len(prompt) + len(response) > target:
                    break
                offsets.append((len(ids) + len(observation) + 1, len(shots)))
                shots.append(shot)
                ids += prompt
                contexts.append(len(ids))
                ids += response
                mask += [False] * len(prompt) + [True] * len(response)
            n = len(ids)
            if n > spec.micro_batch_tokens:
                raise ValueError(
                    f"WorkloadSpec.micro_batch_tokens={spec.micro_batch_tokens}; a trajectory has {n} tokens"
                )
            loss_mask = np.array(mask)
            key = f"bench/train/g{g}m{m}"
            store.put(key, {
                TOKEN_IDS: np.array(ids, np.int32),
                LOGPROBS: np.where(loss_mask, -np.log(vocab) + rng.normal(0, 0.1, n), 0).astype(np.float32),
                LOSS_MASK: loss_mask,
                ADVANTAGES: np.where(loss_mask, advantages[m], 0).astype(np.float32),
            })  # fmt: skip
            metas.append(SeqMeta(
                key=key, group_id=f"g{g}", source=device, sample_index=m, reward=float(rewards[m]),
                success=bool(rewards[m] > 0.5), finish="done", turns=len(shots), num_tokens=n,
                num_response_tokens=int(loss_mask.sum()), context_lengths=tuple(contexts), policy_version=0,
                images=tuple(shots), image_offsets=tuple(offsets),
            ))  # fmt: skip
    return metas
