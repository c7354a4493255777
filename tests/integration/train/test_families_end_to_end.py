"""Every model family through the engine and the trainer: the embedded engine's logprobs of a
stored multimodal multi-turn sequence equal a plain transformers forward of the family; after a
trainer step and ``push_weights`` the engine equals the trainer; a checkpoint's ``hf/`` folder
loads with the family's own transformers class and gives the trainer's logprobs. (Qwen2-VL's
own runs are ``test_trainer_group``.)"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import ray
from transformers import AutoProcessor

from tests.integration.train.test_trainer_group import build_group
from tests.helpers.trainer_workload import make_workload, reference_token_logprobs
from vlrl.config import validate
from vlrl.models import build_tiny, family
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.rollout.protocol import GenerateRequest, ImagePart
from vlrl.store.ray_store import RayStore


@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5"])
def stored(request, ray_session, tmp_path_factory):
    path = build_tiny(request.param, tmp_path_factory.mktemp(request.param))
    work = make_workload(path)
    config = RayStore.Config(namespace=f"families-{uuid.uuid4().hex[:8]}")
    store = work.store(config.build())
    yield request.param, path, work, config
    store.destroy()


def test_engine_and_trainer_agree_with_transformers_before_and_after_a_step(stored, tmp_path):
    name, path, work, store_config = stored
    meta = work.metas[0]
    row = work.rows[meta.key]
    pixels = [work.images[meta.images[i].store_key] for _, i in meta.image_offsets]
    parts = tuple(
        ImagePart(meta.images[i].content_hash, p.shape[1], p.shape[0], p) for (_, i), p in zip(meta.image_offsets, pixels)
    )
    processor = AutoProcessor.from_pretrained(str(path))
    engine = validate(EmbeddedEngine.Config(cpus=0, torch_threads=1)).build(model_path=str(path))
    group = build_group(path, store_config)

    def engine_logprobs() -> np.ndarray:
        request = GenerateRequest(f"s-{uuid.uuid4().hex}", f"t-{uuid.uuid4().hex}", row["token_ids"], parts)
        return np.asarray(ray.get(engine.score.remote(request)).logprobs)

    try:
        model = family(name).load(path).eval()
        before = engine_logprobs()
        np.testing.assert_allclose(before[1:], reference_token_logprobs(model, processor, row["token_ids"], pixels)[1:], atol=2e-4)

        metrics = group.step(work.metas)
        assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
        group.push_weights([engine], version=1)
        after = engine_logprobs()
        model.load_state_dict(ray.get(group.workers[0].weights.remote()), strict=True)
        trainer_side = reference_token_logprobs(model, processor, row["token_ids"], pixels)
        assert not np.allclose(before[1:], after[1:], atol=1e-4)  # the step moved the policy
        np.testing.assert_allclose(after[1:], trainer_side[1:], atol=2e-4)

        group.save(tmp_path / "ckpt", {})
        saved = family(name).model_class.from_pretrained(str(tmp_path / "ckpt" / "hf")).eval()
        reloaded = reference_token_logprobs(saved, processor, row["token_ids"], pixels)
        np.testing.assert_allclose(reloaded, trainer_side, atol=1e-6)
    finally:
        ray.kill(engine)
        group.shutdown()
