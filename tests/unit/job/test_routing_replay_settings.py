"""``loss.routing_replay='rollout'`` is refused, naming the field, where nothing can record the
rollout's routing: a dense family, or vLLM as the engine."""

from __future__ import annotations

import pytest

from vlrl.config import ConfigError
from vlrl.job.train_job import TrainJob
from vlrl.models import TinyModel
from vlrl.rollout.engine import VLLMEngine
from vlrl.train.loss import PolicyLoss

REPLAY = PolicyLoss.Config(kind="grpo", routing_replay="rollout")


def test_replay_needs_a_mixture_of_experts_and_the_embedded_engine():
    TrainJob.Config(loss=REPLAY, tiny=TinyModel(family="qwen3_vl_moe")).check()
    with pytest.raises(ConfigError, match=r"'loss.routing_replay'.*'off' for the qwen3_vl family: its LLM has no mixture-of-experts"):
        TrainJob.Config(loss=REPLAY, tiny=TinyModel(family="qwen3_vl")).check()
    with pytest.raises(ConfigError, match=r"'loss.routing_replay'.*'off' with engine=VLLMEngine: it records no routed experts"):
        TrainJob.Config(loss=REPLAY, tiny=TinyModel(family="qwen3_vl_moe"), engine=VLLMEngine.Config()).check()
