"""How a LoRA run's pushes reach a ``VLLMEngine`` replica: as one vLLM LoRA adapter, for the
families whose vLLM LoRA serves the adapters' logprobs (``ModelFamily.vllm_lora``), else as every
weight with the adapters merged in (``lora_push``); the adapters staged as the PEFT folder vLLM's
LoRA loader reads (``write_adapter``). Free of any vLLM import, so it is tested on any machine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import torch

from vlrl.config import ConfigError
from vlrl.models import ModelFamily, family, registered

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The values vLLM takes for ``max_lora_rank`` (its ``MaxLoRARanks``)."""

ADAPTER_NAME = "vlrl-policy"
"""The name (and, with id 1, the identity) of the one LoRA adapter a replica serves."""


def vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM takes that holds adapters of ``rank`` (0 past 512)."""
    return next((r for r in VLLM_LORA_RANKS if r >= rank), 0)


def lora_push(setting: str, rank: int, policy: ModelFamily) -> tuple[bool, str]:
    """``(adapters, why)``: whether a LoRA run of ``rank`` (0: not one) pushes a replica of the
    family ``policy`` its adapters as a vLLM LoRA adapter (True) or every weight with the adapters
    merged in (False), under ``VLLMEngine.Config.lora_adapters`` = ``setting``, and a line that
    says so. ConfigError for 'on' with a rank vLLM cannot hold."""
    if rank == 0:
        return False, "not a LoRA run: pushes carry every weight"
    if setting == "off":
        return False, "LoRA pushes arrive as merged weights (lora_adapters='off')"
    if not vllm_lora_rank(rank):
        if setting == "on":
            raise ConfigError(
                "engine.lora_adapters", setting, f"'auto' or 'off' for lora.rank {rank}: vLLM's LoRA holds ranks up to {VLLM_LORA_RANKS[-1]}"
            )
        return False, f"LoRA pushes arrive as merged weights (rank {rank} is above vLLM's largest, {VLLM_LORA_RANKS[-1]})"
    if setting == "auto" and not policy.vllm_lora:
        served = [name for name in registered() if family(name).vllm_lora]
        return False, (
            f"LoRA pushes arrive as merged weights (vLLM's LoRA has not served {policy.name}: lora_adapters='auto'"
            f" takes adapters for {', '.join(served)})"
        )
    return True, f"LoRA pushes arrive as a vLLM LoRA adapter (rank {rank}, vLLM max_lora_rank {vllm_lora_rank(rank)})"


def write_adapter(pairs: Mapping[str, tuple[torch.Tensor, torch.Tensor]], path: str | Path, dtype: torch.dtype | None) -> Path:
    """A push's adapters (``{module: (A, s B)}``, checkpoint names: ``adapters.split_push``) as a
    PEFT folder at ``path`` that vLLM's LoRA loader reads: ``base_model.model.M.lora_A.weight`` = A,
    ``...lora_B.weight`` = s B, and ``lora_alpha`` = ``r`` (scale 1: the push folds the scale
    into B). Floating tensors cast to ``dtype`` (None: kept). ValueError for adapters of unequal
    ranks (one ``r`` per folder)."""
    from safetensors.torch import save_file

    ranks = sorted({int(a.shape[0]) for a, _ in pairs.values()})
    if len(ranks) != 1:
        raise ValueError(f"update_weights: LoRA adapters of ranks {ranks}; a push's adapters share one rank")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for module, (a, scaled_b) in pairs.items():
        for leaf, value in (("lora_A", a), ("lora_B", scaled_b)):
            value = torch.as_tensor(value).detach().cpu()
            tensors[f"base_model.model.{module}.{leaf}.weight"] = (value.to(dtype) if dtype is not None else value).contiguous()
    save_file(tensors, str(path / "adapter_model.safetensors"), metadata={"format": "pt"})
    settings = {
        "peft_type": "LORA", "r": ranks[0], "lora_alpha": ranks[0], "lora_dropout": 0.0, "bias": "none",
        "target_modules": sorted(pairs), "use_rslora": False, "use_dora": False,
    }  # fmt: skip
    (path / "adapter_config.json").write_text(json.dumps(settings, indent=2))
    return path


def check_cpu_lora(model_path: str) -> None:
    """Refuse ``lora_adapters='on'`` on CPU for a family whose vLLM LoRA the CPU build cannot
    run (Qwen3-VL-MoE: its experts go through Triton kernels under ``enable_lora``)."""
    from vlrl.models import family_of

    policy = family_of(model_path)
    if policy.routed_experts:
        raise ConfigError(
            "engine.lora_adapters",
            "on",
            f"'auto' or 'off' for {policy.name} on CPU: with enable_lora vLLM's CPU build runs its experts through"
            " Triton kernels it does not have, and the first request ends the engine",
        )
