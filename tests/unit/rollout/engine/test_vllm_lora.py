"""How a LoRA run's pushes reach a vLLM replica (``vllm_lora``), decided before vLLM starts from
the family's own ``ModelFamily.vllm_lora``."""

from __future__ import annotations

import pytest

from vlrl.config import ConfigError
from vlrl.models import build_tiny, family
from vlrl.models.qwen2_vl import Qwen2VL
from vlrl.rollout.engine import VLLMEngine
from vlrl.rollout.engine.vllm_lora import lora_push


@pytest.mark.parametrize(
    ("setting", "rank", "name", "adapters", "says"),
    [
        ("auto", 16, "qwen2_vl", True, "as a vLLM LoRA adapter (rank 16, vLLM max_lora_rank 16)"),
        ("auto", 12, "qwen3_vl", True, "vLLM max_lora_rank 16"),
        ("auto", 16, "qwen3_vl_moe", False, "merged weights (vLLM's LoRA has not served qwen3_vl_moe"),
        ("on", 16, "qwen3_vl_moe", True, "as a vLLM LoRA adapter"),
        ("off", 16, "qwen2_vl", False, "merged weights (lora_adapters='off')"),
        ("auto", 1024, "qwen2_vl", False, "rank 1024 is above vLLM's largest, 512"),
        ("on", 0, "qwen2_vl", False, "not a LoRA run"),
    ],
)
def test_lora_push_says_how_pushes_reach_a_replica(setting, rank, name, adapters, says):
    taken, why = lora_push(setting, rank, family(name))
    assert taken == adapters and says in why


def test_the_family_decides_whether_vllm_serves_its_adapters():
    """A family that says vLLM's LoRA has not served it gets merged weights under 'auto', whatever
    it inherits; the line names the families that do take adapters."""

    class Unserved(Qwen2VL):
        name = "unserved_vl"
        vllm_lora = False

    taken, why = lora_push("auto", 16, Unserved())
    assert not taken and "has not served unserved_vl" in why and "qwen2_5_vl, qwen2_vl, qwen3_vl" in why


def test_lora_adapters_on_refuses_a_rank_vllm_cannot_hold():
    with pytest.raises(ConfigError, match=r"'engine\.lora_adapters': got 'on'.*'auto' or 'off' for lora\.rank 1024.*up to 512"):
        lora_push("on", 1024, family("qwen2_vl"))


def test_lora_adapters_on_is_refused_for_qwen3_vl_moe_on_cpu(tmp_path):
    path = build_tiny("qwen3_vl_moe", tmp_path / "moe", head_dim=32)
    with pytest.raises(ConfigError, match=r"engine\.lora_adapters.*'auto' or 'off' for qwen3_vl_moe on CPU"):
        VLLMEngine.Config(gpus=0, lora_rank=8, lora_adapters="on").build(model_path=str(path))
