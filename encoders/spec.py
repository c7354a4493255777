"""A plug-in encoder named in a config, used end to end: by the trainer and by every engine.

``EncoderSpec`` is the config field (``Trainer.Config.encoder``, ``EmbeddedEngine.Config.encoder``):
a registered name, the factory's fields, a seed and optional initial weights. Actors cannot look
a recipe's registration up (they never import the recipe), so the process that built the config
``resolve``s it into a ``ResolvedEncoder`` (the factory itself, which Ray pickles by value) and
ships that; each actor ``build``s its copy. Every copy starts from the same weights: the seeded
init, then the policy folder's own encoder weights (``<policy>/encoder/``, written by every
checkpoint) or else ``weights``.

The rollout side sizes images by the processor's patch rule (chat building, ``MMItemMeta``,
M-RoPE positions), so ``resolve`` refuses an encoder whose row count differs from the rule's on
probe images, or whose rows are not the LLM's width, before any actor starts. Rows must also come
in the rule's order, row-major over the merged grid (not checkable from counts: the contract).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch

from encoders import registry
from encoders.protocol import EncoderError, VisionEncoder
from vlrl.config import Ge, NonEmpty
from vlrl.mm import PatchRule, describe_image, patch_rule_of

ENCODER_DIR = "encoder"
"""Folder of a policy checkpoint (``hf/encoder/``) holding the plug-in's ``save_pretrained`` weights."""

STATE_PREFIX = "encoder."
"""Prefix of the plug-in's weights in a pushed state dict (the LLM's keep their checkpoint names)."""

PROBE_SIZES = ((40, 30), (320, 240), (1000, 250))
"""``(width, height)`` of the probe images: upscaled, downscaled by small rules, very wide."""


@dataclass(kw_only=True, slots=True)
class EncoderSpec:
    """A plug-in vision encoder in place of the checkpoint's own tower."""

    name: Annotated[str, NonEmpty()]
    """Name in ``encoders.registry`` (a recipe registers the class it defines when it is loaded)."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Keyword fields of the factory (a class's ``Config`` fields)."""
    seed: Annotated[int, Ge(0)] = 0
    """Seed of the initial weights: the trainer and every engine build the same ones."""
    weights: str = ""
    """Initial weights (safetensors file or folder) when the policy folder has no ``encoder/``;
    '' keeps the seeded init."""

    def resolve(self, rule: PatchRule, hidden_size: int) -> ResolvedEncoder:
        """The registered factory, checked on probe images against the policy's patch ``rule``
        and LLM width ``hidden_size``: call it where the name is registered (the driver)."""
        resolved = ResolvedEncoder(self, registry.resolve(self.name))
        check_end_to_end(resolved.build(), rule, hidden_size)
        return resolved

    def resolve_for(self, model_path: str | Path) -> ResolvedEncoder:
        """``resolve`` against the policy checkpoint at ``model_path``: its processor's patch rule
        and its LLM's width."""
        from transformers import AutoConfig, AutoProcessor

        width = AutoConfig.from_pretrained(model_path).get_text_config().hidden_size
        return self.resolve(patch_rule_of(AutoProcessor.from_pretrained(model_path)), width)


@dataclass(frozen=True, slots=True)
class ResolvedEncoder:
    """An ``EncoderSpec`` with its factory: what a driver sends to actors."""

    spec: EncoderSpec
    factory: Any
    """The registered factory (a class or callable), pickled by value when a recipe defines it."""

    def build(self, policy_dir: str | Path | None = None) -> VisionEncoder:
        """The seeded encoder, then ``policy_dir/encoder/`` weights if present, else ``spec.weights``."""
        spec = self.spec
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(spec.seed)
            try:
                encoder = registry.build(spec.name, self.factory, spec.fields)
            except TypeError as error:  # an unknown or missing field
                raise EncoderError(spec.name, f"fields {spec.fields}: {error}") from error
        own = Path(policy_dir) / ENCODER_DIR if policy_dir is not None else None
        if own is not None and own.is_dir():
            encoder.load(own)
        elif spec.weights:
            encoder.load(spec.weights)
        return encoder


def check_end_to_end(encoder: VisionEncoder, rule: PatchRule, hidden_size: int) -> None:
    """Raise ``EncoderError`` unless ``encoder`` gives ``rule``'s token count (from metadata, from
    ``preprocess`` and from ``forward``) on every probe image, in rows of width ``hidden_size``."""
    if encoder.hidden_size != hidden_size:
        raise EncoderError(
            encoder.name, f"hidden_size is {encoder.hidden_size}; the LLM's embeddings have {hidden_size}"
        )
    rng = np.random.default_rng(0)
    was_training = encoder.training
    encoder.eval()
    try:
        for width, height in PROBE_SIZES:
            pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            meta = describe_image(pixels, rule=rule)
            prepared = encoder.preprocess(pixels)
            with torch.no_grad():
                rows = encoder(encoder.collate([prepared])).shape[0]
            got = {"num_tokens(meta)": encoder.num_tokens(meta), "preprocess(pixels).num_tokens": prepared.num_tokens,
                   "forward rows": rows}  # fmt: skip
            for what, count in got.items():
                if count != meta.num_tokens:
                    _, gh, gw = meta.grid_thw
                    raise EncoderError(
                        encoder.name,
                        f"{what} is {count} on a {width}x{height} probe image; the processor's patch rule gives"
                        f" {meta.num_tokens} ({gh // rule.merge_size}x{gw // rule.merge_size} merged"
                        f" {rule.factor}x{rule.factor} patches of the {gw * rule.patch_size}x{gh * rule.patch_size}"
                        f" resized image). An encoder used end to end gives one row per merged patch, row-major"
                        f" ({rule})",
                    )
    finally:
        encoder.train(was_training)
