"""A plug-in encoder end to end between the trainer and an engine (examples/train_custom_encoder.py's
``conv-patch``, shipped to both sides' actors by value): after a step and a weight push the engine's
logprobs of a stored multimodal sequence equal a plain forward of the trainer's weights through that
encoder, and a checkpoint keeps the trained encoder where a trainer or engine built from it finds it
and where a resumed trainer loads it back."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

from encoders.spec import STATE_PREFIX
from vlrl.bench.trainer_workload import make_workload
from vlrl.config import load_recipe, validate
from vlrl.mm import PatchRule, patch_rule_of
from vlrl.pack import Layout, MicroBatchPlanner
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.rollout.protocol import GenerateRequest, ImagePart
from vlrl.store.ray_store import RayStore
from vlrl.train.loss import PolicyLoss
from vlrl.train.optimizer import Optimizer
from vlrl.train.trainer import Trainer
from vlrl.train.trainer_group import TrainerGroup

RECIPE = Path(__file__).resolve().parents[3] / "examples" / "train_custom_encoder.py"


@pytest.fixture(scope="module")
def spec():
    """The example's spec (loading the recipe registers its encoder in this process only)."""
    return load_recipe(f"{RECIPE}:small").trainer.encoder


@pytest.fixture(scope="module")
def stored(ray_session, tiny_path):
    work = make_workload(tiny_path, groups=1, members=2)
    config = RayStore.Config(namespace=f"custom-encoder-{uuid.uuid4().hex[:8]}")
    store = work.store(config.build())
    yield work, config
    store.destroy()


def test_engine_and_trainer_share_the_plug_in_encoder(ray_session, tiny_path, stored, spec, tmp_path):
    ray = ray_session
    work, store_config = stored
    rank = Trainer.Config(
        encoder=spec, optim=Optimizer.Config(lr=1e-2), loss=PolicyLoss.Config(kind="sft"),
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=160),
    )  # fmt: skip
    group = TrainerGroup.Config(encoder=spec, cpus_per_worker=0.5).build(
        TrainerGroup.Stage(rank=rank, steps=0), model_path=str(tiny_path), store_config=store_config, layout=Layout()
    )
    engine = validate(EmbeddedEngine.Config(cpus=0, torch_threads=1, encoder=spec)).build(model_path=str(tiny_path))
    try:
        meta = work.metas[0]
        tokens = work.rows[meta.key]["token_ids"]
        pixels = [work.images[meta.images[i].store_key] for _, i in meta.image_offsets]
        hashes = [meta.images[i].content_hash for _, i in meta.image_offsets]
        parts = tuple(ImagePart(h, p.shape[1], p.shape[0], p) for h, p in zip(hashes, pixels))

        def engine_logprobs() -> np.ndarray:
            request = GenerateRequest(f"s-{uuid.uuid4().hex}", f"t-{uuid.uuid4().hex}", tokens, parts)
            return np.asarray(ray.get(engine.score.remote(request)).logprobs)

        initial = ray.get(group.workers[0].weights.remote())
        before = engine_logprobs()  # the engine built its encoder from the same seed as the trainer
        np.testing.assert_allclose(before[1:], forward(tiny_path, spec, initial, tokens, pixels)[1:], atol=2e-4)

        metrics = group.step(work.metas)
        assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
        group.push_weights([engine], version=1)
        weights = ray.get(group.workers[0].weights.remote())
        trained = {k: v for k, v in weights.items() if k.startswith(STATE_PREFIX)}
        assert trained and all(not torch.equal(v, initial[k]) for k, v in trained.items())  # every encoder weight moved

        after = engine_logprobs()
        assert not np.allclose(before[1:], after[1:], atol=1e-4)
        np.testing.assert_allclose(after[1:], forward(tiny_path, spec, weights, tokens, pixels)[1:], atol=2e-4)

        group.save(tmp_path / "ckpt")
        hf = tmp_path / "ckpt" / "hf"
        rebuilt = spec.resolve(patch_rule_of(AutoProcessor.from_pretrained(hf)), 64).build(hf)
        for name, value in rebuilt.state_dict().items():
            assert torch.equal(value, trained[STATE_PREFIX + name]), name
        loaded = Qwen2VLForConditionalGeneration.from_pretrained(str(hf), output_loading_info=True)[1]
        assert not loaded["missing_keys"] and not loaded["unexpected_keys"]  # hf/ still loads as the Qwen2-VL

        group.step(work.metas)  # then resume from the checkpoint: the encoder comes back too
        group.load(tmp_path / "ckpt")
        resumed = ray.get(group.workers[0].weights.remote())
        assert all(torch.equal(value, resumed[name]) for name, value in weights.items())
    finally:
        ray.kill(engine)
        group.shutdown()


def forward(model_path, spec, weights: dict[str, torch.Tensor], tokens: np.ndarray, pixels: list[np.ndarray]) -> np.ndarray:
    """``log p(token t | tokens < t)`` (0 at t = 0) of a plain Hugging Face forward of ``weights``,
    the encoder's rows in place of the image tokens, M-RoPE on the patch rule's grids."""
    model = Qwen2VLForConditionalGeneration.from_pretrained(str(model_path))
    missing = model.load_state_dict({k: v for k, v in weights.items() if not k.startswith(STATE_PREFIX)}, strict=False)
    assert all(k.startswith("model.visual.") for k in missing.missing_keys) and not missing.unexpected_keys
    rule: PatchRule = patch_rule_of(AutoProcessor.from_pretrained(model_path))
    encoder = spec.resolve(rule, 64).build()
    encoder.load_state_dict({k.removeprefix(STATE_PREFIX): v for k, v in weights.items() if k.startswith(STATE_PREFIX)})
    ids = torch.as_tensor(tokens, dtype=torch.long)
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        embeds[ids == model.config.image_token_id] = encoder(encoder.collate([encoder.preprocess(p) for p in pixels]))
        grids = torch.tensor([rule.grid(p.shape[1], p.shape[0]) for p in pixels])
        positions, _ = model.model.get_rope_index(
            ids[None], mm_token_type_ids=(ids[None] == model.config.image_token_id).int(), image_grid_thw=grids
        )
        logits = model(inputs_embeds=embeds[None], position_ids=positions).logits[0]
    out = torch.log_softmax(logits[:-1].double(), -1).gather(1, ids[1:, None])[:, 0]
    return np.concatenate([[0.0], out.numpy()])
