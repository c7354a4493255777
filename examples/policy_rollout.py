"""Policy rollouts: Agent Loops driven by a Qwen2-VL model (by default an untrained tiny one,
built offline) on desktop tasks, through the whole rollout side of vlrl.

    vlrl rollout examples/policy_rollout.py
    vlrl rollout examples/policy_rollout.py --set model_path=/path/to/qwen2-vl --set replicas=2
    vlrl rollout examples/policy_rollout.py:mixed      # desktop and browser sources in one run
"""

from vlrl.config import AgentBehaviour, DataSource, EnvSettings
from vlrl.job.policy_rollout import PolicyRollout
from vlrl.pool import HarnessPool, HostBudget


def recipe() -> PolicyRollout.Config:
    """Two groups of eight trajectories on the one-click desktop family."""
    return PolicyRollout.Config(
        pool=HarnessPool.Config(budget=HostBudget(total_hosts=3, shares={"loop": 1, "desktop": 2})),
        sources=[
            DataSource(
                name="desktop-click",
                codebase="desktop",
                agent=AgentBehaviour(max_turns=3, max_tokens=24),
                env=EnvSettings(tasks=["click-target"]),
                group_size=8,
            )
        ],
        groups_per_source=2,
    )


def mixed() -> PolicyRollout.Config:
    """A desktop source and a browser source, each on its own env pool."""
    config = recipe()
    config.pool.budget = HostBudget(total_hosts=4, shares={"loop": 1, "desktop": 2, "browser": 1})
    config.sources.append(
        DataSource(
            name="web-forms",
            codebase="browser",
            agent=AgentBehaviour(max_turns=2, max_tokens=24),
            env=EnvSettings(tasks=["form-fill"]),
            group_size=4,
        )
    )
    return config
