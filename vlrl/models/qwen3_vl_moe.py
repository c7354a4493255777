"""Qwen3-VL-MoE: Qwen3-VL's tower, DeepStack and interleaved M-RoPE over a mixture-of-experts LLM.
Each sparse decoder layer's MLP is a router (``mlp.gate``, a linear map to one logit per expert)
and ``num_experts`` SwiGLU experts stored fused, ``mlp.experts.gate_up_proj`` and
``mlp.experts.down_proj``; a token goes to its ``num_experts_per_tok`` most probable experts,
weighted by their softmax probabilities renormalised over the chosen ones.

Transformers keeps the fused experts as ``(experts, out, in)`` in memory; released checkpoints
store them as ``(experts, in, out)``. Transformers' loader takes either (it transposes when the
shapes say so), vLLM's takes only the released layout. So this is the one family whose weights
differ between the trainer's state dict and a checkpoint file: ``checkpoint_tensor`` turns the
first into the second, for the tiny build, ``hf/`` folders and vLLM pushes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

from vlrl.config import ConfigError
from vlrl.models.qwen3_vl import Qwen3VL

FUSED_EXPERTS = (".mlp.experts.gate_up_proj", ".mlp.experts.down_proj")
"""The fused expert weights, stored transposed in a checkpoint file."""
TINY_EXPERTS = 4


class Qwen3VLMoe(Qwen3VL):
    name = "qwen3_vl_moe"
    model_types = ("qwen3_vl_moe",)
    model_class = Qwen3VLMoeForConditionalGeneration
    config_class = Qwen3VLMoeConfig
    routed_experts = True
    vllm_lora = False
    """With ``enable_lora`` vLLM runs its experts through Triton kernels, which the CPU build
    lacks, and the first request ends the engine core, adapter or not (GPU: not run)."""

    def load(self, path: str | Path, *, dtype: torch.dtype = torch.float32) -> nn.Module:
        # transformers' default experts kernel (grouped_mm) takes no float64; its eager loop does
        settings = {"experts_implementation": "eager"} if dtype == torch.float64 else {}
        return self.model_class.from_pretrained(str(path), dtype=dtype, **settings)

    def tiny_text(self, text: dict[str, Any]) -> dict[str, Any]:
        # Four experts, two per token, 3/2 the model's width: a width other than the model's and
        # half of it, so a layout mix-up fails on shapes, never silently, and a multiple of 32 at
        # the widths vLLM's CPU attention serves (hidden 64 and up), since vLLM's CPU experts pad
        # theirs to 32 and its in-place weight reload then fails on the padded copy.
        # norm_topk_prob: the chosen experts' weights renormalised (transformers always does; vLLM reads it)
        return dict(
            num_experts=TINY_EXPERTS, num_experts_per_tok=2, moe_intermediate_size=3 * text["hidden_size"] // 2,
            decoder_sparse_step=1, norm_topk_prob=True,
        )  # fmt: skip

    def check_layout(self, layout: Any, model_path: str | Path | None = None) -> None:
        super().check_layout(layout, model_path)
        if layout.ep > 1:
            config = None if model_path is None else self.config_class.from_pretrained(str(model_path))
            experts = TINY_EXPERTS if config is None else config.text_config.num_experts
            if experts % layout.ep:
                raise ConfigError(
                    "ep", layout.ep, f"a divisor of the model's {experts} experts: each EP rank holds experts / ep whole ones"
                )

    def checkpoint_tensor(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.transpose(1, 2) if name.endswith(FUSED_EXPERTS) else tensor
