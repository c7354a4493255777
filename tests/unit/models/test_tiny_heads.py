"""The tiny builds' head size: 16 by default (what the main job learns with), 32 for a policy
that vLLM's CPU attention serves; M-RoPE's sections always cover half a head."""

from __future__ import annotations

import pytest
import torch

from vlrl.config import ConfigError
from vlrl.models import TinyModel, build_tiny, family

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize(("head_dim", "heads", "kv_heads", "sections"), [(16, 4, 2, [2, 3, 3]), (32, 2, 2, [4, 6, 6])])
def test_heads_of_each_size_build_and_run(name, head_dim, heads, kv_heads, sections, tmp_path):
    path = build_tiny(name, tmp_path / "tiny", head_dim=head_dim)
    model = family(name).model_class.from_pretrained(path).eval()
    text = model.config.get_text_config()
    assert (text.hidden_size // text.num_attention_heads, text.num_attention_heads, text.num_key_value_heads) == (head_dim, heads, kv_heads)
    assert getattr(text, "head_dim", head_dim) == head_dim
    assert text.rope_parameters["mrope_section"] == sections and sum(sections) == head_dim // 2
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.shape[:2] == (1, 3) and torch.isfinite(logits).all()


def test_the_default_head_is_16_and_a_width_must_hold_two_heads():
    assert TinyModel().head_dim == 16
    with pytest.raises(ConfigError, match=r"hidden_size.*a multiple of 64"):
        TinyModel(head_dim=32, hidden_size=96).check()
