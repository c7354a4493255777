"""The offline tiny builds of every model family: deterministic, loadable as the family's own
transformers class, detected back, and their token counts follow the processor's patch rule."""

from __future__ import annotations

import filecmp
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoProcessor

from vlrl.config import load_recipe
from vlrl.mm import PatchRule, patch_rule_of
from vlrl.models import SPECIAL_TOKENS, build_tiny, family, family_of

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"]
PATCH = {"qwen2_vl": 14, "qwen2_5_vl": 14, "qwen3_vl": 16, "qwen3_vl_moe": 16}
TRAIN_CLICK = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"


@pytest.fixture(scope="module", params=FAMILIES)
def tiny(request, tmp_path_factory):
    path = build_tiny(request.param, tmp_path_factory.mktemp(request.param))
    return request.param, path, AutoProcessor.from_pretrained(path), family(request.param).load(path).eval()


def test_same_seed_same_files_other_seed_other_weights(tiny, tmp_path):
    name, path, _, _ = tiny
    same = build_tiny(name, tmp_path / "same")
    other = build_tiny(name, tmp_path / "other", seed=1)
    for file in ("model.safetensors", "tokenizer.json", "config.json", "processor_config.json"):
        assert filecmp.cmp(path / file, same / file, shallow=False), file
    assert filecmp.cmp(path / "tokenizer.json", other / "tokenizer.json", shallow=False)
    assert not filecmp.cmp(path / "model.safetensors", other / "model.safetensors", shallow=False)


def test_the_folder_is_the_family_s_own_checkpoint(tiny):
    name, path, _, model = tiny
    assert family_of(path).name == name
    assert type(model) is family(name).model_class
    assert model.config.model_type == name


def test_tokenizer_has_the_qwen_specials_and_the_chat_template(tiny):
    _, _, processor, model = tiny
    tokenizer = processor.tokenizer
    ids = tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS))
    assert ids == list(range(len(SPECIAL_TOKENS)))
    assert len(tokenizer) == model.config.text_config.vocab_size == 1024
    assert model.config.image_token_id == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert model.config.vision_start_token_id == tokenizer.convert_tokens_to_ids("<|vision_start|>")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "click OK"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|vision_start|><|image_pad|><|vision_end|>click OK<|im_end|>\n<|im_start|>assistant\n")
    text = '{"action": "click", "coordinate": [120, 45]}'
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


@pytest.mark.parametrize("width, height", [(320, 240), (200, 150), (640, 480), (160, 210), (1280, 720), (30, 20)])
def test_forward_on_an_image_and_token_count_follows_the_patch_rule(tiny, width, height):
    name, _, processor, model = tiny
    pixels = np.random.default_rng(width).integers(0, 256, (height, width, 3), dtype=np.uint8)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "click OK"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=[pixels], return_tensors="pt")
    rule = patch_rule_of(processor)
    assert rule == PatchRule(patch_size=PATCH[name], min_pixels=56 * 56, max_pixels=224 * 224)
    assert int((inputs["input_ids"] == model.config.image_token_id).sum()) == rule.num_tokens(width, height)
    assert tuple(inputs["image_grid_thw"][0].tolist()) == rule.grid(width, height)
    with torch.inference_mode():
        logits = model(**inputs).logits
    assert logits.shape == (1, inputs["input_ids"].shape[1], 1024) and torch.isfinite(logits).all()


@pytest.mark.parametrize("name", FAMILIES)
def test_the_two_towers_take_the_sizes_asked_and_still_run(name, tmp_path):
    from vlrl.config import ConfigError
    from vlrl.models.tiny import TinyModel

    settings = TinyModel(family=name, hidden_size=96, layers=3, vision_hidden_size=48, vision_depth=3)
    settings.check()
    path = settings.build(tmp_path / "wide")
    model = family(name).load(path).eval()
    text = model.config.get_text_config()
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads, text.num_key_value_heads) == (96, 3, 6, 3)
    assert len(model.model.visual.blocks) == 3
    processor = AutoProcessor.from_pretrained(path)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "click OK"}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    pixels = np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    with torch.inference_mode():
        logits = model(**processor(text=[prompt], images=[pixels], return_tensors="pt")).logits
    assert logits.shape[-1] == text.vocab_size and torch.isfinite(logits).all()
    with pytest.raises(ConfigError, match="hidden_size"):
        TinyModel(family=name, hidden_size=48).check()


def test_words_become_single_tokens_and_the_point_grid_stays_one_token_per_coordinate(tmp_path):
    from harnesses.desktop.words import vocabulary

    words = vocabulary()
    path = build_tiny("qwen2_vl", tmp_path / "words", words=words)
    tokenizer = AutoProcessor.from_pretrained(path).tokenizer
    plain = AutoProcessor.from_pretrained(build_tiny("qwen2_vl", tmp_path / "plain")).tokenizer
    split = [v for w in words for v in (w, f" {w}", w.lower(), f" {w.lower()}") if len(tokenizer.encode(v)) != 1]
    assert split == []
    assert sum(len(plain.encode(f" {w}")) > 1 for w in words) > len(words) / 2  # what the words change
    for tok in (tokenizer, plain):
        assert [n for n in range(0, 218, 7) for v in (str(n), f" {n}") if len(tok.encode(v)) != 1] == []
    goal = 'name "Kira Ito", email "kira@mail.io"'
    assert tokenizer.decode(tokenizer.encode(goal)) == goal


def test_words_must_be_letters():
    from vlrl.config import ConfigError
    from vlrl.models import TinyModel

    with pytest.raises(ConfigError, match="words"):
        TinyModel(words=("mail.io",)).check()


@pytest.mark.parametrize("name", FAMILIES)
def test_a_recipes_tiny_family_is_the_family_the_job_trains(name, tmp_path):
    """``tiny.family`` on ``train_click:small`` builds that family's folder, whose family the job's
    summary reports (``model_family``). The one whole run of another family is
    the desktop form run of tests/e2e/examples/test_training_recipes.py (a transformers-built
    Qwen3-VL folder)."""
    config = load_recipe(f"{TRAIN_CLICK}:small", [f"tiny.family={name}"])
    assert family_of(config.tiny.build(tmp_path / "model")).name == name


def test_the_moe_build_stores_its_experts_as_released_checkpoints_do_and_loads_back_exactly(tmp_path):
    """Qwen3-VL-MoE's fused experts are ``(experts, out, in)`` in memory and ``(experts, in, out)``
    in the file (what vLLM reads); transformers loads the file back to the very model it built."""
    from safetensors import safe_open

    name = "qwen3_vl_moe"
    path = build_tiny(name, tmp_path / "moe")
    model = family(name).load(path)
    text = model.config.text_config
    assert (text.num_experts, text.num_experts_per_tok) == (4, 2)
    layer = "model.language_model.layers.0.mlp.experts."
    with safe_open(str(path / "model.safetensors"), "pt") as handle:
        stored = {k: handle.get_tensor(k) for k in (layer + "gate_up_proj", layer + "down_proj")}
    assert tuple(stored[layer + "gate_up_proj"].shape) == (4, text.hidden_size, 2 * text.moe_intermediate_size)
    assert tuple(stored[layer + "down_proj"].shape) == (4, text.moe_intermediate_size, text.hidden_size)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        built = family(name).model_class(model.config)
    for key, value in built.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value, rtol=0, atol=0, msg=key)
    for key, value in stored.items():
        assert torch.equal(family(name).checkpoint_tensor(key, model.state_dict()[key]), value)
