"""A data source binds three separately configured things, one of each:

- the harness codebase (which package runs the environment, and so which env pool),
- the agent behaviour (prompt template, action format, turns, sampling),
- the environment settings (resolution, task families, task parameters).

Every group of a source shares one configuration, as group-relative advantages require; several
sources (codebases, behaviours, settings) mix in one run, each contributing its batch share.
That the codebase is registered and has an env pool is checked where the pool is configured
(``pool.sources.check_sources_have_pools``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from vlrl.config.schema import ConfigError, Ge, Gt, Le, NonEmpty
from vlrl.records import ActionFormat


@dataclass(kw_only=True, slots=True)
class EnvSettings:
    """How each harness instance of the source is built; unset fields keep the harness defaults."""

    width: Annotated[int, Ge(64)] | None = None
    """Screen width in pixels."""

    height: Annotated[int, Ge(64)] | None = None
    """Screen height in pixels."""

    tasks: list[str] | None = None
    """Task families to draw from (None: all of the harness's families)."""

    max_steps: Annotated[int, Ge(1)] | None = None
    """Harness step limit per episode (then truncated)."""

    params: dict[str, int | float | str | bool] = field(default_factory=dict)
    """Further harness-specific settings, passed to the harness constructor as keywords."""

    def as_kwargs(self) -> dict[str, Any]:
        named = {"width": self.width, "height": self.height, "max_steps": self.max_steps}
        kwargs: dict[str, Any] = {k: v for k, v in named.items() if v is not None}
        if self.tasks is not None:
            kwargs["tasks"] = tuple(self.tasks)
        return {**kwargs, **self.params}


@dataclass(kw_only=True, slots=True)
class AgentBehaviour:
    """How the Agent Loop talks to the policy and turns its text into actions."""

    prompt_template: Annotated[str, NonEmpty()] = "gui-agent"
    """Name of the chat prompt template that frames goal, history and screenshot."""

    action_format: ActionFormat = "qwen25vl"
    """Action grammar the policy writes and the strict parser accepts."""

    max_turns: Annotated[int, Ge(1)] = 10
    """Turns (requests to the policy) per episode."""

    goal_every_turn: bool = False
    """Restate the goal in every turn's message, not only the first. A model copies a name out of
    the goal or matches it to the screen through attention; the tiny model's M-RoPE base of 10
    turns every frequency by more than a radian within a few dozen tokens, so a goal several
    turns back is out of its reach (measured: ``docs/lab/training-runs.md``)."""

    history_images: Annotated[int, Ge(1)] | None = None
    """Screenshots kept whole in the prompt: the last k (older turns keep their text and answers,
    their screenshots as ``older_images`` says), or None for all. With a window, each turn after
    the k-th starts a new training sequence (its prompt is no longer the last one's prefix)."""

    older_images: Literal["drop", "downscale", "stub"] = "drop"
    """Screenshots older than the last ``history_images``: left out, shrunk to at most
    ``older_image_tokens`` tokens, or replaced by a line of text saying one was there."""

    older_image_tokens: Annotated[int, Ge(1)] = 16
    """Image tokens an older screenshot may take when ``older_images='downscale'``: the largest
    size of its aspect within this budget under the model's patch rule."""

    temperature: Annotated[float, Ge(0)] = 1.0
    """Sampling temperature."""

    top_p: Annotated[float, Gt(0), Le(1)] = 1.0
    """Nucleus sampling mass."""

    max_tokens: Annotated[int, Ge(1)] = 64
    """Tokens the policy may generate per turn."""

    format_penalty: Annotated[float, Ge(0)] = 0.1
    """Subtracted from the episode reward for each reply that is not a well-formed action."""


@dataclass(kw_only=True, slots=True)
class Replay:
    """Replay of hard tasks (``DataSource.replay``; ARPO's and DART's scheme): a task whose group
    solved it rarely is played again, and a success it had joins the later group if that one
    solved nothing, so the group still has a reward spread to learn from."""

    max_pass_rate: Annotated[float, Gt(0), Le(1)] = 0.25
    """A task is hard when its group's pass rate is above 0 and at most this: one success of the
    group is kept for replay (the newest policy's, once a later group solves it again)."""

    revisits: Annotated[int, Ge(1)] = 2
    """Later groups of a hard task, each launched before any new task of the source."""

    cap: Annotated[int, Ge(1)] = 32
    """Kept successes of the source at most; a new one evicts the oldest."""

    max_age: Annotated[int, Ge(0)] = 4
    """Policy versions a kept success may lag behind the current policy and still join a group
    (its tokens then train under truncated importance sampling, ``loss.tis_cap``, against the
    policy that sampled them); an older one is deleted instead. This bound replaces
    ``driver.max_staleness`` for replayed tokens."""


@dataclass(kw_only=True, slots=True)
class Branching:
    """Branching rollouts (``DataSource.branching``; Tree-GRPO's scheme on GUI episodes): a group
    is a few trees instead of ``group_size`` independent episodes. Each tree plays one episode from
    reset (its root), then restarts it from ``points`` of its turns, ``branches`` times each: the
    branch's harness instance is brought to that turn by fork or replay (``vlrl.harness.fork``),
    the policy's prefix is the root's, and only the turns after it are new. A branch costs only
    its own turns, so a group of equal env steps holds more trajectories, and the siblings of a
    branch point are compared with each other there (``control.branch_credit``)."""

    points: Annotated[int, Ge(1)] = 1
    """Branch points per root episode (distinct turns; fewer when the episode is shorter)."""

    branches: Annotated[int, Ge(1)] = 2
    """Branches started from each branch point."""

    choose: Literal["uniform", "entropy"] = "uniform"
    """Where to branch: turns drawn uniformly from the root's turns after its first, or the turns
    where the policy was least sure (the highest mean surprisal, ``-logprob``, of the tokens it
    sampled there)."""

    def trees(self, group_size: int) -> int:
        """Trees per group, so that a group's expected env steps equal ``group_size`` flat
        episodes': a branch from a turn drawn uniformly costs about half an episode, so a tree
        costs about ``1 + points * branches / 2`` episodes; each tree then caps its branches at its
        share of the steps (``group_size / trees`` times its root's length)."""
        return max(1, round(group_size / (1 + self.points * self.branches / 2)))


@dataclass(kw_only=True, slots=True)
class ExternalAgent:
    """An agent program of the user's own plays the source's episodes (``rollout.external``): per
    episode vlrl starts it with ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` naming an endpoint bound
    to that trajectory, ``VLRL_TASK`` and ``VLRL_SEED``, traces every chat request it makes, and
    reads its reward from the last line it prints (a number, or ``{"reward": r, "success": b}``)."""

    command: list[str] = field(default_factory=list)
    """The program's argv; ``{task}`` and ``{seed}`` in an argument are replaced by the episode's."""

    entry: str = ""
    """Instead of ``command``: ``module:function``, called in a fresh Python process as
    ``function(task=..., seed=...)``; its return value is the reward (or the dict above)."""

    time_limit_s: Annotated[float, Gt(0)] = 300.0
    """Wall seconds one run may take; past them its process group is killed and the run fails."""

    env: dict[str, str] = field(default_factory=dict)
    """Further environment variables of the program."""

    cwd: str | None = None
    """Working directory of the program (None: the loop host's)."""

    def check(self) -> None:
        if bool(self.command) == bool(self.entry):
            raise ConfigError("command", self.command, "an argv list, or else entry='module:function' (one of the two)")
        if self.entry and not re.fullmatch(r"[\w.]+:\w+", self.entry):
            raise ConfigError("entry", self.entry, "'module:function', e.g. 'my_agent:play'")


@dataclass(kw_only=True, slots=True)
class DataSource:
    """Tasks of one harness codebase under one agent behaviour and one env settings."""

    name: Annotated[str, NonEmpty()] = "desktop"
    """Name in metrics and per-source batch shares."""

    codebase: Annotated[str, NonEmpty()] = "desktop"
    """Registered harness codebase id; its env pool runs this source's instances."""

    agent: AgentBehaviour = field(default_factory=AgentBehaviour)
    """Agent behaviour shared by every group of this source."""

    env: EnvSettings = field(default_factory=EnvSettings)
    """Environment settings shared by every group of this source."""

    batch_share: Annotated[float, Gt(0)] = 1.0
    """Relative share of every training batch this source contributes."""

    group_size: Annotated[int, Ge(1)] = 8
    """Trajectories per task (a group) for group-relative advantages."""

    replay: Replay | None = None
    """Replay of hard tasks' successes into their later groups; None for none."""

    branching: Branching | None = None
    """Branching rollouts: each group as trees of episodes restarted from their own turns, at the
    env-step cost of ``group_size`` episodes; None: ``group_size`` independent episodes."""

    external: ExternalAgent | None = None
    """An agent program of the user's own that plays this source's episodes in place of the Agent
    Loop (None: the Agent Loop on ``codebase``). The program owns its environment, so the source
    needs no env pool; ``agent`` still sets the sampling (temperature, top_p, max_tokens per reply)
    and ``agent.max_turns`` the requests per episode."""

    def check(self) -> None:
        if self.branching is not None and self.external is not None:
            raise ConfigError(
                "branching", "set", "None with external: an agent program owns its environment, which vlrl cannot fork"
            )
        if self.branching is not None and self.agent.max_turns < 2:
            raise ConfigError(
                "agent.max_turns", self.agent.max_turns, "at least 2 with branching (a branch restarts from turn 1 on)"
            )

    @property
    def runs_per_group(self) -> int:
        """Tenants the driver starts per group: ``group_size`` episodes, or a branching source's trees."""
        return self.group_size if self.branching is None else self.branching.trees(self.group_size)

    @property
    def env_pool(self) -> str | None:
        """The codebase whose env pool leases this source's episodes a harness (None: external)."""
        return None if self.external is not None else self.codebase
