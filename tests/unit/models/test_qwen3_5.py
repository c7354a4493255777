"""The Qwen3.5 tiny build: a hybrid of gated DeltaNet and full-attention layers with heads of 32,
partial interleaved M-RoPE and Qwen3-VL's 16-pixel tower without DeepStack, detected back as its
family and running on an image prompt."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoProcessor, Qwen3_5ForConditionalGeneration

from tests.helpers.chat import screen, user_turn
from vlrl.config import load_recipe
from vlrl.mm import PatchRule, patch_rule_of
from vlrl.models import build_tiny, family, family_of
from vlrl.models.tiny import TinyModel

TRAIN_CLICK = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"


def test_the_tiny_build_is_a_hybrid_qwen3_5_that_runs_on_an_image(tmp_path):
    path = TinyModel(family="qwen3_5", layers=5).build(tmp_path / "tiny")
    assert family_of(path).name == "qwen3_5"
    model = family("qwen3_5").load(path).eval()
    assert type(model) is Qwen3_5ForConditionalGeneration
    text = model.config.text_config
    assert text.layer_types == ["linear_attention"] * 3 + ["full_attention", "full_attention"]
    assert text.hidden_size == 128  # the family's tiny width: four heads of 32, as the others have four of 16
    assert (text.head_dim, text.num_attention_heads, text.linear_key_head_dim) == (32, 4, 32)
    assert (text.linear_num_key_heads, text.linear_num_value_heads) == (4, 8)  # two value heads a key head; TP=2 splits both
    assert text.rope_parameters["partial_rotary_factor"] == 0.5  # sections of 2/3/3 frequencies rotate 16 of 32 dims
    assert not hasattr(model.config.vision_config, "deepstack_visual_indexes")
    processor = AutoProcessor.from_pretrained(path)
    assert patch_rule_of(processor) == PatchRule(patch_size=16, min_pixels=56 * 56, max_pixels=224 * 224)
    shot = screen(320, 240, 5)
    ids = torch.as_tensor(user_turn(processor, "click OK", [shot]), dtype=torch.long)[None]
    assert int((ids == model.config.image_token_id).sum()) == patch_rule_of(processor).num_tokens(320, 240)
    vision = processor.image_processor(images=[shot], return_tensors="pt")
    with torch.inference_mode():
        logits = model(
            input_ids=ids, pixel_values=vision["pixel_values"], image_grid_thw=vision["image_grid_thw"],
            mm_token_type_ids=(ids == model.config.image_token_id).int(),
        ).logits  # fmt: skip
    assert logits.shape == (1, ids.shape[1], text.vocab_size) and torch.isfinite(logits).all()


def test_the_default_tiny_build_has_one_layer_of_each_kind(tmp_path):
    text = family("qwen3_5").load(build_tiny("qwen3_5", tmp_path / "tiny")).config.text_config
    assert text.layer_types == ["linear_attention", "full_attention"]


def test_a_job_takes_context_and_tensor_parallelism_for_the_family():
    """The recipe's checks, the family's ``check_layout`` among them, accept CP and TP (they
    refused both before the DeltaNet layers had a CP and a TP path): loading it raises nothing."""
    load_recipe(f"{TRAIN_CLICK}:small", ["tiny.family=qwen3_5", "layout.cp=2", "layout.tp=2"])
