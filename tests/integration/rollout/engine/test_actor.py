"""The engine as a Ray actor: concurrent calls batch, weights arrive as numpy, restarts miss."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.chat import mixed_requests, part, perturbed, request, screen, user_turn
from vlrl.config import ConfigError, validate
from vlrl.rollout.engine import EmbeddedEngine
from vlrl.rollout.protocol import CacheMiss, GenerateResult


def test_actor_batches_updates_and_restarts_empty(ray_session, tiny_path, processor):
    ray = ray_session
    config = validate(EmbeddedEngine.Config(batch_wait_ms=100, cpus=0, torch_threads=2))
    engine, restarted = (config.build(model_path=str(tiny_path)) for _ in range(2))  # the second stands in for a restart
    shot = screen(320, 240, 50)
    prompt = user_turn(processor, "click OK", [shot])

    results = ray.get([engine.generate.remote(r) for r in mixed_requests(processor)])
    assert all(isinstance(r, GenerateResult) and len(r.token_ids) == 8 for r in results)
    assert ray.get(engine.stats.remote())["batches"] < len(results)

    first = ray.get(engine.generate.remote(request(prompt, (part(shot),), trajectory="t")))
    ray.get(engine.update_weights.remote(perturbed(tiny_path), 3))
    assert ray.get(engine.policy_version.remote()) == 3
    again = ray.get(engine.generate.remote(request(prompt, (part(shot, send=False),), trajectory="t")))
    assert (first.policy_version, again.policy_version) == (0, 3)
    assert not np.allclose(first.logprobs[:1], again.logprobs[:1])
    ray.get(engine.forget.remote("t"))
    assert ray.get(engine.load.remote()) == 0

    ray.kill(engine)
    miss = ray.get(restarted.generate.remote(request(prompt, (part(shot, send=False),))))
    assert isinstance(miss, CacheMiss) and miss.missing == (part(shot).content_hash,)
    with pytest.raises(ValueError, match="prompt_ids hold 1 run"):
        ray.get(restarted.generate.remote(request(prompt)))
    ray.kill(restarted)


def test_config_needs_room_for_control_calls():
    with pytest.raises(ConfigError, match="max_concurrency"):
        validate(EmbeddedEngine.Config(max_batch=8, max_concurrency=8))
