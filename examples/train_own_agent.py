"""Train an agent program of your own, unchanged: vlrl starts it per episode and traces its
OpenAI chat requests token for token (docs/train-your-agent.md).

    vlrl train examples/train_own_agent.py:warm_start   # a policy that writes click(x, y) (no RL)
    vlrl train examples/train_own_agent.py --set start_from=runs/own_agent_warm_start/checkpoints/warm-start
    vlrl train examples/train_own_agent.py:small        # a 2-step smoke run from the untrained policy (CI)
    vlrl train examples/train_own_agent.py:agentlab     # one RL step on AgentLab's GenericAgent (own venv)
    vlrl train examples/train_own_agent.py:counter      # warm start on the counter agent's own runs, then RL
    vlrl train examples/train_own_agent.py:counter_small  # the same path at smoke size (CI)

The program, ``examples/agents/click_agent.py``, imports only ``openai`` and the standard
library and plays its own click task (it owns its environment, so the run has no env pool).
Each episode it gets ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` for an endpoint bound to that
trajectory and ``VLRL_SEED`` for the task; it prints its reward last. Groups are 8 runs of one
seed, as for any source.

RL learns only from groups where some runs succeed, and the untrained tiny Qwen2-VL never writes
a parseable ``click(x, y)``. vlrl has no oracle for a program it does not know; it warm-starts
on the program's own runs against a teacher instead (``counter``: the multi-turn
``examples/agents/counter_agent.py`` played by the scripted ``counter_teacher.py``), or the run
starts from a checkpoint that already writes the program's action format (``warm_start``,
vlrl's own warm start on a similar harness task in that format).
``examples/agents/click_baselines.py`` measures chance and the best constant point on the
held-out seeds.
"""

import sys
from pathlib import Path

from vlrl.recipes import (
    AgentBehaviour,
    DataSource,
    Driver,
    EmbeddedEngine,
    EnvSettings,
    Evaluation,
    ExternalAgent,
    GroupHook,
    HarnessPool,
    HostBudget,
    MicroBatchPlanner,
    Optimizer,
    PolicyLoss,
    ProgramTeacher,
    TinyModel,
    TrainerGroup,
    TrainJob,
    WarmStart,
    base_recipe,
)

AGENT = Path(__file__).resolve().parent / "agents" / "click_agent.py"
AGENTLAB = Path(__file__).resolve().parent / "agents" / "agentlab_miniwob.py"
COUNTER = Path(__file__).resolve().parent / "agents" / "counter_agent.py"
COUNTER_TEACHER = f"{Path(__file__).resolve().parent / 'agents' / 'counter_teacher.py'}:teacher"


def own_agent_source(**overrides) -> DataSource:
    """The click agent as a data source: its command line, a time limit per episode, and the
    sampling the endpoint imposes on its requests (temperature 1, at most 24 tokens a reply)."""
    return DataSource(
        name="click-agent",
        external=ExternalAgent(command=[sys.executable, str(AGENT), "--seed", "{seed}"], time_limit_s=120),
        # action_format: vlrl's baselines (eval.chance) click as pyautogui.click(x, y), which click(x, y) reads
        agent=AgentBehaviour(max_turns=3, max_tokens=24, temperature=1.0, action_format="pyautogui"),
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
        warm_start=None,  # starts from a checkpoint that writes click(x, y) (start_from); :counter warm-starts on traces
        steps=20,
        eval=Evaluation(episodes=64, every=10, chance=False, screenshots=0),
        checkpoint_every=10,
    )


def small() -> TrainJob.Config:
    """2 RL steps of 2 groups of 4 runs, keeping the all-fail groups an untrained policy makes."""
    config = recipe()
    config.run_dir = "runs/train_own_agent_small"
    return _smoke_rl(config)


def _smoke_rl(config: TrainJob.Config) -> TrainJob.Config:
    """RL at smoke size: 2 steps of 2 groups of 4 runs, all-fail groups kept, a 2-episode evaluation."""
    config.sources[0].group_size = 4
    config.driver.groups_per_batch = 2
    config.advantage.sampler.include_min = True
    config.advantage.drop_zero_advantage = False
    config.steps = 2
    config.eval = Evaluation(episodes=2, every=0, chance=False, screenshots=0)
    config.checkpoint_every = 0
    return config


def warm_start() -> TrainJob.Config:
    """A policy that writes the agent's action format: the main job's warm start (512 oracle
    demonstrations, 250 steps) on vlrl's desktop click-target, with replies in the ``pyautogui``
    format, whose ``pyautogui.click(x, y)`` the agent's ``click(x, y)`` pattern reads. No RL steps:
    ``recipe`` trains the agent from its checkpoint (``--set start_from=RUN/checkpoints/warm-start``)."""
    source = DataSource(
        name="desktop-click",
        codebase="desktop",
        agent=AgentBehaviour(max_turns=1, max_tokens=24, temperature=1.0, prompt_template="gui-agent-short", action_format="pyautogui"),
        env=EnvSettings(width=160, height=120, tasks=["click-target"], params={"distractors": 0}),
        group_size=8,
    )  # fmt: skip
    config = base_recipe([source], run_dir="runs/own_agent_warm_start")
    config.warm_start.continue_below_baseline = True  # no RL follows here; the agent's run judges it
    config.steps = 0
    config.eval = Evaluation(episodes=64, every=0, screenshots=0)
    return config


def agentlab() -> TrainJob.Config:
    """One RL step on the traces of AgentLab's GenericAgent playing MiniWoB++ click-test: a group
    of 2 runs, each one environment step of at most 2 requests (AgentLab asks again when a reply
    does not parse) of 32 tokens, held-out on 1 episode. ``python`` is the one first on PATH: put
    the environment AgentLab is installed in there, and MINIWOB_URL and AGENTLAB_MODEL in the
    environment (docs/train-your-agent.md gives the command)."""
    config = recipe()
    config.run_dir = "runs/train_own_agent_agentlab"
    config.sources = [
        DataSource(
            name="agentlab-miniwob",
            external=ExternalAgent(command=["python", str(AGENTLAB), "--seed", "{seed}"], time_limit_s=1500),
            agent=AgentBehaviour(max_turns=2, max_tokens=32, temperature=1.0),
            group_size=2,
        )
    ]
    config.pool.loop_host.tenant_timeout_s = 1800  # above the program's limit: browsers start slowly on a loaded host
    config.driver.groups_per_batch = 1
    config.advantage.sampler.include_min = True  # the tiny policy fails click-test: keep the group
    config.advantage.drop_zero_advantage = False
    config.micro_batches.max_tokens_per_micro_batch = 8192  # a MiniWoB++ prompt is about 3,300 tokens
    config.steps = 1
    config.eval = Evaluation(episodes=1, every=0, chance=False, screenshots=0)
    config.checkpoint_every = 0
    return config


def counter() -> TrainJob.Config:
    """The counter agent (up to 4 turns, the whole conversation resent each turn) warm-started on
    its own runs against ``counter_teacher.py`` (512 runs, the successful ones kept; 250 SFT steps),
    then 30 RL steps; held-out success on 64 seeds every 10 steps. The main job's settings
    otherwise (``base_recipe``: RL rate 1e-4 for a multi-turn source, 8 groups of 8 a step)."""
    source = DataSource(
        name="counter-agent",
        external=ExternalAgent(command=[sys.executable, str(COUNTER), "--seed", "{seed}"], time_limit_s=120),
        agent=AgentBehaviour(max_turns=4, max_tokens=24, temperature=1.0, action_format="pyautogui"),
        group_size=8,
    )  # the baselines' clicks are written as pyautogui.click(x, y), which the program's click(x, y) reads
    config = base_recipe([source], run_dir="runs/counter_agent")
    config.pool.budget = HostBudget(total_hosts=1, shares={"loop": 1.0})  # the program owns its screen: no env pool
    config.warm_start = WarmStart(
        episodes=512, steps=250, sequences_per_step=32, lr=1e-2, teacher=ProgramTeacher(script=COUNTER_TEACHER)
    )
    config.steps = 30
    config.eval = Evaluation(episodes=64, every=10, chance=False, screenshots=0)
    return config


def counter_small() -> TrainJob.Config:
    """``counter`` at smoke size (CI): 8 runs against the teacher, 4 SFT steps, 2 RL steps of 2
    groups of 4, a 2-episode evaluation; RL follows whatever the warm start reached."""
    config = counter()
    config.run_dir = "runs/counter_agent_small"
    config.warm_start.episodes = 8
    config.warm_start.steps = 4
    config.warm_start.sequences_per_step = 4
    config.warm_start.continue_below_baseline = True
    return _smoke_rl(config)
