"""Every built-in encoder and a user's own pass one contract suite; broken plug-ins are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from encoders import registry
from encoders.protocol import EncoderError, VisionEncoder
from encoders.qwen2vl import ViTCost
from tests.helpers.user_encoder import BlockColourEncoder
from vlrl.mm import PatchRule, describe_image

ENCODERS = ["qwen2vl", "siglip", "torchvision", "block_colour"]


@pytest.fixture(scope="module", autouse=True)
def user_registered():
    registry.register("block_colour", BlockColourEncoder)


def tiny(name: str) -> VisionEncoder:
    torch.manual_seed(0)
    factory = registry.resolve(name)
    return registry.make(name, **getattr(factory, "check_fields", {}))


def image(width: int, height: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize("name", ENCODERS)
def test_passes_contract(name):
    encoder = tiny(name)
    assert isinstance(encoder, torch.nn.Module)
    registry.check_encoder(encoder, [image(70, 50, 1), image(130, 90, 2)])


@pytest.mark.parametrize("name", ENCODERS)
def test_save_load_round_trip(name, tmp_path):
    source, target = tiny(name), tiny(name)
    with torch.no_grad():
        for p in target.parameters():
            p.add_(0.1)
    batch = source.collate([source.preprocess(image(90, 60))])
    source.eval(), target.eval()
    assert not torch.allclose(source(batch), target(batch))
    target.load(source.save_pretrained(tmp_path / name))
    assert torch.equal(source(batch), target(batch))


def test_load_refuses_mismatched_weights(tmp_path):
    tiny("block_colour").save_pretrained(tmp_path)
    with pytest.raises(EncoderError, match="block_colour.*do not fit"):
        BlockColourEncoder(hidden_size=4).load(tmp_path)


def test_qwen2vl_tokens_follow_patch_rule():
    encoder = tiny("qwen2vl")
    rule = encoder.config.patch_rule
    meta = describe_image(image(100, 60), rule=rule)
    assert encoder.num_tokens(meta) == meta.num_tokens == 8
    other = describe_image(image(100, 60), rule=PatchRule(min_pixels=28 * 28, max_pixels=28 * 28 * 4))
    with pytest.raises(EncoderError, match="qwen2vl', image .*another rule"):
        encoder.num_tokens(other)


def test_vit_cost_attention_terms():
    kw = dict(depth=4, embed_dim=32, mlp_ratio=2, hidden_size=64, patch_size=14, merge_size=2, temporal_patch_size=2)
    full, windowed = ViTCost(**kw), ViTCost(**kw, window=8, full_attention_layers=(3,))
    assert ViTCost(**kw, window=64)((1, 40, 60)) == full((1, 40, 60))  # one window covers it all
    assert windowed((1, 40, 60)) < full((1, 40, 60))
    small, large = full((1, 8, 8)), full((1, 16, 16))
    assert large > 4 * small  # quadratic attention: 4x patches costs more than 4x


class Broken(BlockColourEncoder):
    name = "broken"


class WrongTokens(Broken):
    def num_tokens(self, item):
        return super().num_tokens(item) + 1


class NegativeCost(Broken):
    def cost(self, item):
        return -1.0


class Noisy(Broken):
    def forward(self, batch):
        return super().forward(batch) + torch.rand(batch.pixel_values.shape[0], self.hidden_size)


class Frozen(Broken):
    def forward(self, batch):
        return super().forward(batch).detach()


@pytest.mark.parametrize(
    "factory, rule",
    [(WrongTokens, "num_tokens"), (NegativeCost, "cost"), (Noisy, "deterministic"), (Frozen, "gradients")],
)
def test_broken_plugin_refused_at_registration(factory, rule):
    with pytest.raises(EncoderError, match=f"encoder 'broken_{rule}': rule '{rule}': "):
        registry.register("broken_" + rule, factory)
    assert "broken_" + rule not in registry.registered()


def test_a_path_is_checked_on_first_resolve_not_at_registration():
    registry.register("lazy_wrong_tokens", "tests.unit.encoders.test_contract:WrongTokens")
    assert "lazy_wrong_tokens" in registry.registered()
    for _ in range(2):  # not remembered as checked after a failure
        with pytest.raises(EncoderError, match="encoder 'lazy_wrong_tokens': rule 'num_tokens': forward gave"):
            registry.make("lazy_wrong_tokens")


def test_check_fields_the_factory_refuses_name_the_rule():
    with pytest.raises(EncoderError, match=r"'bad_fields': rule 'check_fields': the factory refused \{'depth': 2\}"):
        registry.register("bad_fields", BlockColourEncoder, check_fields={"depth": 2})


def test_registering_over_a_name_needs_override():
    with pytest.raises(EncoderError, match="'qwen2vl': already registered as 'encoders.qwen2vl:Qwen2VLEncoder'"):
        registry.register("qwen2vl", BlockColourEncoder)
    assert registry.resolve("qwen2vl").__name__ == "Qwen2VLEncoder"
    registry.register("block_colour", BlockColourEncoder)  # the same class again is no clash
    registry.register("colour_or_noise", BlockColourEncoder)
    with pytest.raises(EncoderError, match="override=True"):
        registry.register("colour_or_noise", Noisy)
    with pytest.raises(EncoderError, match="rule 'deterministic'"):  # override still runs the check
        registry.register("colour_or_noise", Noisy, override=True)
    assert registry.resolve("colour_or_noise") is BlockColourEncoder


def test_contract_yields_every_rule_in_order():
    assert list(registry.contract(tiny("block_colour"))) == [
        "output shape", "num_tokens", "finite output", "cost", "cost monotone", "deterministic", "batch order",
        "gradients",
    ]  # fmt: skip


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(EncoderError, match=r"'nope': not registered; known: \[.*'qwen2_5vl', 'qwen2vl', .*'siglip', 'torchvision'"):
        registry.make("nope")
