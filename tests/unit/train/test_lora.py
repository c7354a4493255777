"""LoRA settings, adapter placement and the push format (issue 38), without a process group:
errors name the field before anything is built, patterns pick the right layers per family, the
merged checkpoint equals PEFT's own forward, and an engine merging pushed adapters replaces
the previous ones instead of adding to them."""

from __future__ import annotations

import pytest
import torch

from vlrl.config import ConfigError, apply_overrides, validate
from vlrl.job.train_job import TrainJob
from vlrl.models import build_tiny, family_of
from vlrl.models.adapters import LORA_A, LORA_B, MergedAdapters, split_push
from vlrl.train.lora import LoRA


@pytest.mark.parametrize(
    "overrides, field, expected",
    [
        (["lora.rank=8", "lora.tower_modules=[attn.qkv, 'attn qkv']"], "lora.tower_modules", "module-name suffixes"),
        (["lora.rank=8", "lora.llm_modules=[q_proj, q_proj]"], "lora.llm_modules", "each pattern once"),
        (["lora.rank=8", "lora.llm_modules=[]"], "lora.llm_modules", "at least one pattern"),
        (["lora.rank=8", "lora.dropout=0.1", "layout.tp=2"], "lora.dropout", "0 with layout.tp = 2"),
        (["lora.dropout=1.0"], "lora.dropout", "< 1"),
        (["lora.rank=-1"], "lora.rank", ">= 0"),
    ],
)
def test_bad_settings_name_the_field(overrides, field, expected):
    with pytest.raises(ConfigError) as error:
        validate(apply_overrides(TrainJob.Config(), overrides))
    assert error.value.path == field and expected in str(error.value)


def test_a_pattern_that_matches_nothing_names_the_field_and_the_layers_there(tiny_path):
    """Checked on the checkpoint's architecture (meta device) when the run's settings are validated."""
    overrides = [f"model_path={tiny_path}", "lora.rank=4", "lora.tower_modules=[attn.qkv, mlp.up_proj]"]
    with pytest.raises(ConfigError, match="'mlp.up_proj'.*mlp.fc1") as error:
        apply_overrides(TrainJob.Config(), overrides)
    assert error.value.path == "lora.tower_modules"


@pytest.mark.parametrize(
    "family, lora, want",
    [
        ("qwen2_vl", LoRA.Config(rank=2, llm_modules=("q_proj",), merger_modules=("mlp.0",)),
         {"model.language_model.layers.0.self_attn.q_proj", "model.language_model.layers.1.self_attn.q_proj",
          "model.visual.merger.mlp.0"}),
        ("qwen3_vl", LoRA.Config(rank=2, llm_modules=(), tower_modules=("attn.proj",), merger_modules=("linear_fc2",)),
         {"model.visual.blocks.0.attn.proj", "model.visual.blocks.1.attn.proj", "model.visual.merger.linear_fc2",
          "model.visual.deepstack_merger_list.0.linear_fc2"}),
        # the default llm_modules on an LLM without dense MLPs: its attention; experts and router stay frozen
        ("qwen3_vl_moe", LoRA.Config(rank=2),
         {f"model.language_model.layers.{i}.self_attn.{p}_proj" for i in (0, 1) for p in "qkvo"}),
        # the default on a hybrid LLM: the DeltaNet layer's projections, the full-attention layer's, both MLPs
        ("qwen3_5", LoRA.Config(rank=2),
         {*(f"model.language_model.layers.0.linear_attn.{p}" for p in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj")),
          *(f"model.language_model.layers.1.self_attn.{p}_proj" for p in "qkvo"),
          *(f"model.language_model.layers.{i}.mlp.{p}_proj" for i in (0, 1) for p in ("gate", "up", "down"))}),
    ],
)  # fmt: skip
def test_patterns_select_the_layers_of_their_part_only_and_freeze_the_rest(tmp_path, family, lora, want):
    path = build_tiny(family, tmp_path / family)
    model = family_of(path).load(path)
    adapters = lora.build(model)
    assert set(adapters.targets) == want  # 'proj' under blocks only: not patch_embed.proj, not the LLM's o_proj
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"{m}.lora_{ab}.default.weight" for m in want for ab in "AB"}


def test_a_named_mlp_pattern_is_still_refused_on_qwen3_vl_moe(tmp_path):
    """Only the default passes over the MLP patterns an LLM without dense MLPs lacks."""
    path = build_tiny("qwen3_vl_moe", tmp_path / "moe")
    LoRA.Config(rank=2).check_model(str(path))
    with pytest.raises(ConfigError, match="'down_proj'.*self_attn.q_proj") as error:
        LoRA.Config(rank=2, llm_modules=("q_proj", "down_proj")).check_model(str(path))
    assert error.value.path == "llm_modules"


def test_merged_checkpoint_and_push_equal_the_peft_forward(tiny_path):
    model = family_of(tiny_path).load(tiny_path, dtype=torch.float64)
    adapters = LoRA.Config(rank=3, alpha=5.0, llm_modules=("o_proj",), merger_modules=("mlp.2",)).build(model)
    for name, param in model.named_parameters():
        if ".lora_B." in name:
            param.data.normal_(0, 0.1)
    state = model.state_dict()
    merged = adapters.merged_state(state)
    assert set(merged) == set(family_of(tiny_path).load(tiny_path).state_dict())  # the checkpoint's own names
    layer = "model.visual.merger.mlp.2"
    x = torch.randn(4, merged[layer + ".weight"].shape[1], dtype=torch.float64)
    peft_out = model.get_submodule(layer)(x)
    torch.testing.assert_close(x @ merged[layer + ".weight"].T + merged[layer + ".bias"], peft_out)
    push = dict(adapters.adapter_state(state.items()))
    assert set(push) == {m + s for m in adapters.targets for s in (LORA_A, LORA_B)}
    a, scaled_b = push[layer + LORA_A], push[layer + LORA_B]
    torch.testing.assert_close(state[layer + ".base_layer.weight"] + scaled_b @ a, merged[layer + ".weight"])


def test_an_engine_replaces_the_previous_adapters_and_takes_a_pushed_base():
    weights = {"m.weight": torch.zeros(3, 2, dtype=torch.float64)}
    applied = MergedAdapters()
    a, b = torch.ones(1, 2, dtype=torch.float64), torch.full((3, 1), 2.0, dtype=torch.float64)
    applied.apply(weights, {"m": (a, b)}, rebased=set())
    applied.apply(weights, {"m": (a, 3 * b)}, rebased=set())
    torch.testing.assert_close(weights["m.weight"], torch.full((3, 2), 6.0, dtype=torch.float64))  # 0 + 6, not 2 + 6
    weights["m.weight"].fill_(1.0)  # a push that carried the base 1
    applied.apply(weights, {"m": (a, b)}, rebased={"m"})
    torch.testing.assert_close(weights["m.weight"], torch.full((3, 2), 3.0, dtype=torch.float64))


def test_a_push_with_half_a_pair_is_refused():
    with pytest.raises(ValueError, match=r"\['m'\] have lora_A and no lora_B"):
        split_push({"m" + LORA_A: torch.zeros(1, 2)})
    plain, pairs = split_push({"m" + LORA_A: torch.zeros(1, 2), "m" + LORA_B: torch.zeros(3, 1), "n.weight": torch.zeros(1)})
    assert set(plain) == {"n.weight"} and set(pairs) == {"m"}


def test_full_modules_train_in_full_and_go_into_pushes_and_the_peft_folder(tiny_path, tmp_path):
    model = family_of(tiny_path).load(tiny_path)
    with pytest.raises(ConfigError, match="'head'") as error:
        LoRA.Config(rank=2, full_modules=("head",)).build(model)
    assert error.value.path == "full_modules"
    adapters = LoRA.Config(rank=2, llm_modules=("q_proj",), full_modules=("lm_head",)).build(model)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert "lm_head.weight" in trainable and "model.language_model.embed_tokens.weight" not in trainable
    state = model.state_dict()
    assert "lm_head.weight" in dict(adapters.adapter_state(state.items()))
    folder = adapters.save_adapter(tmp_path / "adapter", state, base_model=str(tiny_path))
    assert '"modules_to_save": [\n    "lm_head"' in (folder / "adapter_config.json").read_text()
