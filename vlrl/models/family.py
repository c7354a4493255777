"""The model-family contract: what differs between Qwen2-VL, Qwen2.5-VL and Qwen3-VL, and nothing
else. The trainer, the engines, the server and checkpoints take any registered family.

A family is a ``ModelFamily`` subclass, registered by name (``vlrl.models.register`` or the
``vlrl.models`` entry-point group). What the families share stays outside: the LLM is called
layer by layer on 3-D M-RoPE positions that every family computes alike for still images
(``train.mrope``; each family's own rotary embedding applies its sections, interleaved for
Qwen3-VL), and the chat format, patch rule and placeholders come from the checkpoint's own
processor and config. What differs is here:

* which checkpoints it is (``model_types`` of ``config.json``) and their transformers class;
* its vision tower as an encoder plug-in (``tower_encoder``): the planner, lazy pixel fetch and
  the all-to-all then apply unchanged, and a tower with DeepStack levels returns them as extra
  columns (``VisionEncoder.feature_levels``);
* the action format its released checkpoints were trained to write;
* its tiny offline build (``tiny_config``, ``tiny_width``, ``tiny_rate_scale``), which the tests
  and the CPU demos train;
* a weight whose in-memory layout differs from its checkpoint file's (``checkpoint_tensor``);
* whether its LLM routes tokens to experts (``routed_experts``);
* the trainer's specifics: the layouts it cannot train under yet (``check_layout``) and the LLM
  layers LoRA adapts by default (``lora_llm_modules``);
* the engines' specifics: whether vLLM's LoRA serves its adapters (``vllm_lora``).

So a family that reuses mechanisms vlrl has (attention, linear attention, routed experts, a tower
an encoder plug-in wraps) is one module here and its registration (``registry.BUILTINS``, or
``vlrl.models.register`` / the ``vlrl.models`` entry-point group for a user's own).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from encoders.protocol import VisionEncoder
from vlrl.config import ConfigError
from vlrl.records import ActionFormat


class ModelFamily(ABC):
    """One family of vision-language checkpoints. Subclasses set the class attributes and
    implement ``tower_encoder`` and ``tiny_config``; an instance holds no state."""

    name: ClassVar[str]
    """Registry id and ``tiny.family`` value (the family's ``model_type``, e.g. ``qwen2_5_vl``)."""
    model_types: ClassVar[tuple[str, ...]]
    """``config.json`` ``model_type`` values of its checkpoints."""
    model_class: ClassVar[type[nn.Module]]
    """The transformers class a checkpoint folder of the family loads as."""
    action_format: ClassVar[ActionFormat]
    """The action grammar the family's released checkpoints write (an agent's default)."""
    routed_experts: ClassVar[bool] = False
    """Whether its LLM has mixture-of-experts layers, whose routing the embedded engine can
    record and the trainer replay (``models.routing``)."""
    lora_llm_modules: ClassVar[tuple[str, ...]] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    """The LLM's linear layers LoRA adapts by default (``lora.llm_modules`` None), as name
    suffixes: every projection of its attention and dense MLPs. A name the loaded model lacks is
    passed over (Qwen3-VL-MoE's sparse layers hold their experts as fused tensors, not linear
    layers: its attention alone is adapted, experts and router frozen)."""
    vllm_lora: ClassVar[bool] = False
    """Whether vLLM's LoRA serves the family's adapters' logprobs, so that a LoRA run's pushes
    reach a ``VLLMEngine`` replica as a vLLM LoRA adapter under ``lora_adapters='auto'``
    (``rollout.engine.vllm_lora``); False: every weight, the adapters merged in."""
    tiny_width: ClassVar[int] = 64
    """The tiny build's LLM width unless ``tiny.hidden_size`` names one: four heads of 16."""
    tiny_rate_scale: ClassVar[float] = 1.0
    """What a run's learning rates are multiplied by while it trains the family's tiny build,
    unless ``tiny.rate_scale`` names a scale: the example recipes' rates were measured on the
    tiny Qwen2-VL, and a family that stalls at them says so here."""

    def load(self, path: str | Path, *, dtype: torch.dtype = torch.float32) -> nn.Module:
        """The checkpoint folder ``path`` as the family's transformers model."""
        return self.model_class.from_pretrained(str(path), dtype=dtype)

    def tower(self, model: nn.Module) -> nn.Module:
        """The loaded model's own vision tower."""
        return model.model.visual

    def language_model(self, model: nn.Module) -> nn.Module:
        """The loaded model's LLM backbone (embeddings, decoder layers, final norm, rotary)."""
        return model.model.language_model

    @abstractmethod
    def tower_encoder(self, model: nn.Module, processor: Any) -> VisionEncoder:
        """The loaded model's own tower as an encoder plug-in (parameters shared, names kept),
        preprocessing as the checkpoint's own ``processor`` does."""

    @abstractmethod
    def tiny_config(
        self,
        text: dict[str, Any],
        vision: dict[str, int],
        tokens: dict[str, int],
        tokenizer: Any,
        chat_template: str,
        min_pixels: int,
        max_pixels: int,
    ) -> tuple[Any, Any]:
        """``(config, processor)`` of the family's tiny build: ``text`` is the tiny LLM's settings
        (by default hidden 64, 2 layers, 4 heads, 2 KV heads, M-RoPE sections [2, 3, 3]),
        ``vision`` the vision tower's ``depth``, ``hidden_size`` and ``num_heads``, ``tokens`` the
        placeholder ids, and the processor wraps ``tokenizer`` with the family's image processor
        bounded by ``min_pixels``/``max_pixels``."""

    def check_layout(self, layout: Any, model_path: str | Path | None = None) -> None:
        """``ConfigError`` naming the field of the trainer's ``layout`` (``pack.Layout``) that the
        trainer cannot run this family's LLM under (``model_path``: the checkpoint, where its
        config decides; None: the family's tiny build, not built yet); any layout without expert
        parallelism is fine unless a family says so."""
        if layout.ep > 1 and not self.routed_experts:
            raise ConfigError(
                "ep", layout.ep, f"1 for the {self.name} family: expert parallelism splits mixture-of-experts layers, and it has none"
            )

    def checkpoint_tensor(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        """The weight ``name`` of the loaded model's state dict as a checkpoint file stores it (what
        a saved ``hf/`` folder and vLLM's ``load_weights`` take); the same tensor unless the
        family's transformers class keeps it in another layout in memory (Qwen3-VL-MoE's experts)."""
        return tensor

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
