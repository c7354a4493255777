"""Train an agent program of your own, unchanged: vlrl starts it per episode and traces its
OpenAI chat requests token for token (docs/train-your-agent.md).

    vlrl train examples/train_own_agent.py          # 20 RL steps on examples/agents/click_agent.py
    vlrl train examples/train_own_agent.py:small    # a 2-step smoke run (CI)

The program, ``examples/agents/click_agent.py``, imports only ``openai`` and the standard
library and plays its own click task (it owns its environment, so the run has no env pool).
Each episode it gets ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` for an endpoint bound to that
trajectory and ``VLRL_SEED`` for the task; it prints its reward last. Groups are 8 runs of one
seed, as for any source. The policy is the untrained tiny Qwen2-VL, so this run shows the
plumbing, not learning: without a warm start it rarely writes a parseable ``click(x, y)``.
"""

import sys
from pathlib import Path

from vlrl.recipes import (
    AgentBehaviour,
    DataSource,
    Driver,
    EmbeddedEngine,
    Evaluation,
    ExternalAgent,
    GroupHook,
    HarnessPool,
    HostBudget,
    MicroBatchPlanner,
    Optimizer,
    PolicyLoss,
    TinyModel,
    TrainerGroup,
    TrainJob,
)

AGENT = Path(__file__).resolve().parent / "agents" / "click_agent.py"


def own_agent_source(**overrides) -> DataSource:
    """The click agent as a data source: its command line, a time limit per episode, and the
    sampling the endpoint imposes on its requests (temperature 1, at most 24 tokens a reply)."""
    return DataSource(
        name="click-agent",
        external=ExternalAgent(command=[sys.executable, str(AGENT), "--seed", "{seed}"], time_limit_s=120),
        agent=AgentBehaviour(max_turns=3, max_tokens=24, temperature=1.0),
        group_size=8,
        **overrides,
    )


def recipe() -> TrainJob.Config:
    return TrainJob.Config(
        run_dir="runs/train_own_agent",
        tiny=TinyModel(rope_theta=10.0),
        engine=EmbeddedEngine.Config(cpus=0, max_batch=32, torch_threads=2),
        pool=HarnessPool.Config(budget=HostBudget(total_hosts=1, shares={"loop": 1.0})),  # no env pool
        sources=[own_agent_source()],
        driver=Driver.Config(groups_per_batch=4, max_staleness=1, max_groups_in_flight=8, prefetch_batches=1),
        advantage=GroupHook.Config(),
        optim=Optimizer.Config(lr=1e-3),
        loss=PolicyLoss.Config(kind="grpo"),
        micro_batches=MicroBatchPlanner.Config(max_tokens_per_micro_batch=4096),
        trainer=TrainerGroup.Config(cpus_per_worker=1),
        warm_start=None,  # no oracle exists for a program vlrl does not know
        steps=20,
        eval=Evaluation(episodes=32, every=10, chance=False, screenshots=0),
        checkpoint_every=10,
    )


def small() -> TrainJob.Config:
    """2 RL steps of 2 groups of 4 runs, keeping the all-fail groups an untrained policy makes."""
    config = recipe()
    config.run_dir = "runs/train_own_agent_small"
    config.sources[0].group_size = 4
    config.driver.groups_per_batch = 2
    config.advantage.sampler.include_min = True
    config.advantage.drop_zero_advantage = False
    config.steps = 2
    config.eval = Evaluation(episodes=2, every=0, chance=False, screenshots=0)
    config.checkpoint_every = 0
    return config
