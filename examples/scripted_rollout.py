"""Scripted episodes on the Harness Pool: the harness oracle (or random clicks) on desktop tasks.

    vlrl rollout examples/scripted_rollout.py
    vlrl rollout examples/scripted_rollout.py:random_policy
    vlrl rollout examples/scripted_rollout.py:desktop_and_browser
"""

from vlrl.config import DataSource, EnvSettings
from vlrl.pool import HarnessPool, HostBudget
from vlrl.pool.scripted_rollout import ScriptedRollout


def recipe() -> ScriptedRollout.Config:
    """Two desktop sources (a one-click family and a multi-step form) sharing one env pool."""
    return ScriptedRollout.Config(
        pool=HarnessPool.Config(budget=HostBudget(total_hosts=3, shares={"loop": 1, "desktop": 2})),
        sources=[
            DataSource(name="desktop-click", codebase="desktop", env=EnvSettings(tasks=["click-target"])),
            DataSource(name="desktop-form", codebase="desktop", env=EnvSettings(tasks=["fill-form"])),
        ],
        episodes_per_source=16,
    )


def random_policy() -> ScriptedRollout.Config:
    """Chance level of the same sources."""
    config = recipe()
    config.policy = "random"
    return config


def desktop_and_browser() -> ScriptedRollout.Config:
    """Two harness codebases in one run, each in its own env pool with its own budget share."""
    config = recipe()
    config.pool.budget = HostBudget(total_hosts=4, shares={"loop": 1, "desktop": 2, "browser": 1})
    config.sources = [
        DataSource(name="desktop-click", codebase="desktop", env=EnvSettings(tasks=["click-target"])),
        DataSource(name="web-forms", codebase="browser", env=EnvSettings(tasks=["form-fill"])),
    ]
    config.episodes_per_source = 8
    return config
