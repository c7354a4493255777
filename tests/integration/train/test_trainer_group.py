"""The trainer as Ray actors: weights reach an embedded engine through the object store (its
logprobs then equal the trainer's), and a run resumed from a checkpoint matches the
uninterrupted run step for step."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import torch
from transformers import AutoProcessor, Qwen2VLForConditionalGeneration

from vlrl.bench.trainer_workload import make_workload, reference_token_logprobs
from vlrl.config import validate
from vlrl.pack import Layout, MicroBatchPlanner
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.rollout.protocol import GenerateRequest, ImagePart
from vlrl.store.ray_store import RayStore
from vlrl.train.loss import PolicyLoss
from vlrl.train.optimizer import Optimizer
from vlrl.train.trainer import Trainer
from vlrl.train.trainer_group import TrainerGroup


@pytest.fixture(scope="module")
def stored(ray_session, tiny_path):
    work = make_workload(tiny_path)
    config = RayStore.Config(namespace=f"trainer-group-{uuid.uuid4().hex[:8]}")
    store = work.store(config.build())
    yield work, config
    store.destroy()


def build_group(model_path, store_config, *, schedule: str = "constant", steps: int = 0, **model) -> TrainerGroup:
    """``model``: the ``trainer`` section's model fields (dtype, ...), which every rank's config repeats."""
    rank = Trainer.Config(
        **model, optim=Optimizer.Config(lr=1e-3, schedule=schedule), loss=PolicyLoss.Config(kind="grpo"),
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=160),
    )  # fmt: skip
    stage = TrainerGroup.Stage(rank=validate(rank), steps=steps)
    return TrainerGroup.Config(cpus_per_worker=0.5, **model).build(
        stage, model_path=str(model_path), store_config=store_config, layout=Layout()
    )


def test_engine_serves_the_trainers_weights(ray_session, tiny_path, stored):
    ray = ray_session
    work, store_config = stored
    group = build_group(tiny_path, store_config)
    engine = validate(EmbeddedEngine.Config(cpus=0, torch_threads=1)).build(model_path=str(tiny_path))
    try:
        meta = work.metas[0]
        row = work.rows[meta.key]
        pixels = [work.images[meta.images[i].store_key] for _, i in meta.image_offsets]
        parts = tuple(ImagePart(meta.images[i].content_hash, p.shape[1], p.shape[0], p) for (_, i), p in zip(meta.image_offsets, pixels))

        def engine_logprobs() -> np.ndarray:
            answer = ray.get(engine.score.remote(GenerateRequest(f"s-{uuid.uuid4().hex}", f"t-{uuid.uuid4().hex}", row["token_ids"], parts)))
            return np.asarray(answer.logprobs)

        before = engine_logprobs()
        metrics = group.step(work.metas)
        assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
        group.push_weights([engine], version=1)
        assert ray.get(engine.policy_version.remote()) == 1
        after = engine_logprobs()

        weights = ray.get(group.workers[0].weights.remote())
        model = Qwen2VLForConditionalGeneration.from_pretrained(str(tiny_path))
        model.load_state_dict(weights, strict=True)
        trainer_side = reference_token_logprobs(model, AutoProcessor.from_pretrained(str(tiny_path)), row["token_ids"], pixels)
        assert not np.allclose(before[1:], after[1:], atol=1e-4)  # the step moved the policy
        np.testing.assert_allclose(after[1:], trainer_side[1:], atol=2e-4)
    finally:
        ray.kill(engine)
        group.shutdown()


def test_resumed_run_matches_the_uninterrupted_run(ray_session, tiny_path, stored, tmp_path):
    work, store_config = stored
    batches = [work.metas, work.metas[:4], work.metas[2:]]
    keys = ("loss", "grad_norm", "entropy", "tokens", "lr")

    group = build_group(tiny_path, store_config, dtype="float64", schedule="cosine", steps=2)
    try:
        uninterrupted = [group.step(batches[0])]
        group.save(tmp_path / "ckpt", {"driver": {"version": 1}})
        uninterrupted += [group.step(b) for b in batches[1:]]
        final = group_weights(group)
    finally:
        group.shutdown()

    resumed_group = build_group(tiny_path, store_config, dtype="float64", schedule="cosine", steps=2)
    try:
        assert resumed_group.load(tmp_path / "ckpt") == {"driver": {"version": 1}}
        resumed = [resumed_group.step(b) for b in batches[1:]]
        resumed_final = group_weights(resumed_group)
    finally:
        resumed_group.shutdown()
    for step, (a, b) in enumerate(zip(uninterrupted[1:], resumed, strict=True), start=2):
        assert b["step"] == a["step"] == step
        for key in keys:
            assert b[key] == a[key], (step, key)
    for name, value in final.items():
        assert torch.equal(value, resumed_final[name]), name
    assert [m["lr"] for m in uninterrupted] == pytest.approx([1e-3, 0.55e-3, 1e-4])  # cosine to a tenth, then flat
    assert (tmp_path / "ckpt" / "hf" / "model.safetensors").is_file()
    assert Qwen2VLForConditionalGeneration.from_pretrained(str(tmp_path / "ckpt" / "hf")) is not None


def group_weights(group: TrainerGroup) -> dict[str, torch.Tensor]:
    import ray

    return ray.get(group.workers[0].weights.remote())
