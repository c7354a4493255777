"""Qwen3.5: a hybrid LLM of gated DeltaNet linear-attention layers interleaved with gated full
attention (``text_config.layer_types``; three linear to one full in the released checkpoints),
under Qwen3-VL's tower without DeepStack; partial interleaved M-RoPE (a quarter of each head
rotates); it writes screen points normalised to 0-999 as Qwen3-VL does.

A linear-attention layer keeps a recurrent state (and a short causal-convolution window) instead
of keys and values, so what vlrl does for it differs: packed training resets both at every
segment border and runs each segment in sequence order across CP ranks, TP splitting the layer's
heads (``train.linear_attention``), and the embedded engine keeps them at turn borders
(``rollout.engine.runner``). See ``docs/models.md`` for what runs where.
"""

from __future__ import annotations

from typing import Any

from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

from vlrl.models.qwen3_vl import Qwen3VL

LINEAR_ATTENTION = ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj")
"""A gated DeltaNet layer's projections (``linear_attn``): ``[q | k | v]``, the output gate ``z``,
the per-head ``beta`` and decay inputs ``b`` and ``a``, and the output."""
HEAD_DIM = 32
"""Head size of the tiny build's attention and DeltaNet heads: vLLM's CPU attention and the
released checkpoints' kernels want at least 32 (the tiny build's 16 is too small)."""


class Qwen35(Qwen3VL):
    name = "qwen3_5"
    model_types = ("qwen3_5",)
    model_class = Qwen3_5ForConditionalGeneration
    config_class = Qwen3_5Config
    lora_llm_modules = (*Qwen3VL.lora_llm_modules, *LINEAR_ATTENTION)
    """The full-attention layers' and MLPs' projections and the DeltaNet layers' own."""
    vllm_lora = False
    """Not measured: vLLM's LoRA has not served a Qwen3.5 build here."""
    tiny_width = 4 * HEAD_DIM
    """Four heads, as the other families' tiny builds have (of 16): at half the rates, 64 wide
    (two heads) the main job reached 0.635 held-out, 128 wide 0.81 (``docs/lab/model-families.md``)."""
    tiny_rate_scale = 0.5
    """At the example recipes' warm-start rate of 1e-2 the hybrid build's loss stalls near 0.15
    (held-out 0.19 at 64 wide, 0.20 at 128 on the main job); at half the warm start's and the
    RL stage's rates it learns (``docs/lab/model-families.md``)."""

    def tiny_config(self, text, vision, tokens, tokenizer, chat_template, min_pixels, max_pixels):
        config, processor = super().tiny_config(text, vision, tokens, tokenizer, chat_template, min_pixels, max_pixels)
        del config.vision_config.deepstack_visual_indexes  # Qwen3.5's tower has no DeepStack
        return config, processor

    def tiny_text(self, text: dict[str, Any]) -> dict[str, Any]:
        # Heads of at least HEAD_DIM; the M-RoPE sections the tiny build chose for its head size
        # then rotate part of each head, as the released checkpoints rotate a quarter of theirs.
        head_dim = max(HEAD_DIM, text["hidden_size"] // text["num_attention_heads"])
        heads = text["hidden_size"] // head_dim
        rotary = 2 * sum(text["rope_parameters"]["mrope_section"])
        layers = text["num_hidden_layers"]
        return dict(
            head_dim=head_dim,
            num_attention_heads=heads,
            num_key_value_heads=min(text["num_key_value_heads"], heads),
            rope_parameters={**text["rope_parameters"], "mrope_interleaved": True, "partial_rotary_factor": rotary / head_dim},
            # every fourth layer and the last attend in full, the others are DeltaNet layers
            layer_types=["full_attention" if (i + 1) % 4 == 0 or i == layers - 1 else "linear_attention" for i in range(layers)],
            # two value heads to a key head, as the released checkpoints have; at least two key
            # heads, so that TP over 2 ranks splits them (train.linear_attention)
            linear_num_key_heads=heads,
            linear_num_value_heads=2 * heads,
            linear_key_head_dim=head_dim,
            linear_value_head_dim=head_dim,
            linear_conv_kernel_dim=4,
        )

