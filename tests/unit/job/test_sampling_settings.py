"""A run's sampling settings must be ones the trainer can score: the engine has to report the
temperature and nucleus fields they need, and sources packed together must store the same ones."""

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


def test_vllm_refuses_a_temperature_or_top_p_it_cannot_report_naming_the_field():
    with pytest.raises(ConfigError, match=r"'sources\[0\].agent.temperature'.*vLLM does not report \['extra/temperature'"):
        _job((0.7, 1.0), engine=VLLMEngine.Config()).check()
    with pytest.raises(ConfigError, match=r"'sources\[0\].agent.top_p'.*vLLM does not report \['extra/nucleus'\]"):
        _job((1.0, 0.9), engine=VLLMEngine.Config()).check()
    _job((1.0, 1.0), (0.0, 1.0), engine=VLLMEngine.Config()).check()  # nothing to report


def test_sources_packed_together_must_store_the_same_sampling_fields():
    _job((0.7, 0.9), (1.3, 0.5)).check()  # the embedded engine reports both fields for both
    with pytest.raises(ConfigError, match=r"'sources\[1\].agent.temperature'.*sources\[0\]'s do \(\['extra/temperature'\]"):
        _job((0.7, 1.0), (1.0, 1.0)).check()
    with pytest.raises(ConfigError, match=r"'sources\[1\].agent.top_p'.*sequences packed together"):
        _job((1.0, 1.0), (1.0, 0.9)).check()
