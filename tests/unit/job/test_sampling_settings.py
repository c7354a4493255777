"""A run's sampling settings must be ones the trainer can score: sources packed together must
store the same temperature and nucleus fields (both engines report them)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vlrl.config import ConfigError
from vlrl.job.train_job import TrainJob
from vlrl.recipes import DataSource
from vlrl.rollout.engine import VLLMEngine


def _job(*samplings: tuple[float, float], **config) -> TrainJob.Config:
    sources = [
        replace(DataSource(name=f"s{i}"), agent=replace(DataSource().agent, temperature=t, top_p=p))
        for i, (t, p) in enumerate(samplings)
    ]
    job = TrainJob.Config(**config)
    job.sources = sources
    job.pool.budget.shares = {"desktop": 1.0}
    return job


def test_vllm_trains_at_any_temperature_and_top_p_it_reports_the_fields_of():
    _job((0.7, 0.9), (1.3, 0.5), engine=VLLMEngine.Config()).check()  # vLLM reports both fields, as the embedded engine
    _job((1.0, 1.0), (0.0, 1.0), engine=VLLMEngine.Config()).check()
    with pytest.raises(ConfigError, match=r"'sources\[1\].agent.top_p'.*sequences packed together"):
        _job((0.7, 0.9), (0.7, 1.0), engine=VLLMEngine.Config()).check()


def test_sources_packed_together_must_store_the_same_sampling_fields():
    _job((0.7, 0.9), (1.3, 0.5)).check()  # the embedded engine reports both fields for both
    with pytest.raises(ConfigError, match=r"'sources\[1\].agent.temperature'.*sources\[0\]'s do \(\['extra/temperature'\]"):
        _job((0.7, 1.0), (1.0, 1.0)).check()
    with pytest.raises(ConfigError, match=r"'sources\[1\].agent.top_p'.*sequences packed together"):
        _job((1.0, 1.0), (1.0, 0.9)).check()
