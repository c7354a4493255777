"""One turn loop for every episode player, and the scripted player built on it.

``play_episode`` is the loop the Agent Loop (policy replies), the warm start's ``DemoEpisode``
(oracle replies written as text) and ``ScriptedEpisode`` (oracle or random clicks, no model)
share: reset, then each turn ask the player for a move and apply it, until the harness ends the
episode or the turns run out. A move is an action; an ``Invalid`` reply (one that does not parse)
costs the penalty and the next turn's note says why, and so does an action the harness refuses
(``ActionError``); a ``Stop`` ends the episode early with a reason (the oracle has no move).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from vlrl.harness import Action, ActionError, Observation
from vlrl.pool.tenant import EnvSession, TenantContext
from vlrl.records import Finish


@dataclass(frozen=True, slots=True)
class Invalid:
    """A reply that is not a well-formed action."""

    feedback: str
    """Why, as the next turn's note tells the player."""


@dataclass(frozen=True, slots=True)
class Stop:
    """The player has no move: the episode ends here."""

    reason: str
    """Why, in words."""


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a branch of an episode starts (``play_episode``'s ``resume``): the screen its harness
    instance was brought to (by fork or replay) and what the episode had come to there."""

    obs: Observation
    info: dict[str, Any]
    note: str
    """The note the turn was given when it was first played."""
    turns: int
    """Turns already played: the branch plays at most ``max_turns - turns`` more."""
    reward: float
    """What the turns before earned (their step rewards less penalties)."""


Move = Action | Invalid | Stop
Player = Callable[[Observation, str], Awaitable[Move]]
"""``(observation, note) -> move``. The note is the goal on the first turn, empty after a step
(the goal again under ``repeat_goal``), and ``Invalid action: ...`` after a reply or action that
was refused."""


@dataclass(frozen=True, slots=True)
class Episode:
    """How one played episode went."""

    reward: float
    """Sum of step rewards, less the penalty of every invalid reply."""
    success: bool
    """The harness's verdict at the end (its ``info['success']``, else a positive last reward)."""
    finish: Finish
    """Why it ended."""
    actions: tuple[Action, ...]
    """The actions the harness ran, in order."""
    info: dict[str, Any]
    """The harness's last ``info``."""
    task: str = ""
    """The task family reset drew (its ``info["task"]``; '' when the harness does not say)."""
    stopped: str = ""
    """The player's reason when it stopped the episode ('' when it did not)."""
    turn_rewards: tuple[float, ...] = ()
    """What each move earned, in order: its step reward, or less the penalty when it was
    invalid or refused (they sum to ``reward``)."""
    turn_states: tuple[str | None, ...] = ()
    """The observation's ``state_key`` each move was made on, in order."""


async def play_episode(
    env: EnvSession,
    player: Player,
    *,
    seed: int,
    options: dict[str, Any] | None = None,
    max_turns: int,
    invalid_penalty: float | None = None,
    repeat_goal: bool = False,
    resume: Resume | None = None,
) -> Episode:
    """Play one episode of ``env`` from ``reset(seed, options)``: at most ``max_turns`` moves.

    ``invalid_penalty``: what an invalid reply or a refused action costs; None for a player that
    never makes one (a scripted policy), whose ``ActionError`` then propagates as the bug it is.
    ``repeat_goal``: every turn's note ends with the goal (``AgentBehaviour.goal_every_turn``).
    ``resume``: play on from a turn of an earlier play of the episode instead of resetting (a
    branch); the result's reward includes what the turns before earned, its actions and turn
    records only the new turns'."""
    if resume is None:
        obs, info = await env.reset(seed=seed, options=options)
        goal, note, reward, played = obs.goal or "", obs.goal or "", 0.0, 0
    else:
        obs, info, note, reward, played = resume.obs, resume.info, resume.note, resume.reward, resume.turns
        goal = obs.goal or ""
    task = str(info.get("task") or (options or {}).get("task") or "")
    later = goal if repeat_goal else ""
    success, finish = False, "max_turns"
    actions: list[Action] = []
    turn_rewards: list[float] = []
    turn_states: list[str | None] = []
    for _ in range(max_turns - played):
        move = await player(obs, note)
        if isinstance(move, Stop):
            return Episode(
                reward, False, finish, tuple(actions), info, task, move.reason, tuple(turn_rewards), tuple(turn_states)
            )
        turn_states.append(obs.state_key)
        try:
            if isinstance(move, Invalid):
                raise ActionError(move.feedback)
            obs, step_reward, terminated, truncated, info = await env.step(move)
        except ActionError as error:
            if invalid_penalty is None:
                raise
            reward -= invalid_penalty
            turn_rewards.append(-invalid_penalty)
            note = "\n".join(filter(None, (f"Invalid action: {error}", later)))
            continue
        actions.append(move)
        reward += step_reward
        turn_rewards.append(float(step_reward))
        note = later
        if terminated or truncated:
            finish = "done" if terminated else "truncated"
            success = bool(info.get("success", step_reward > 0))
            break
    return Episode(reward, success, finish, tuple(actions), info, task, "", tuple(turn_rewards), tuple(turn_states))


@dataclass(frozen=True, slots=True)
class EpisodeResult:
    seed: int
    task: str | None
    reward: float
    steps: int
    success: bool
    actions: tuple[Action, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class ScriptedEpisode:
    """A tenant that plays one episode with a scripted policy: the harness's oracle (random clicks
    where it has none) or random clicks. The model-free Agent Loop: the pool benchmark's workload
    and the random baseline of evaluation."""

    seed: int
    task: str | None = None
    policy: Literal["oracle", "random"] = "oracle"
    max_steps: int = 20

    async def run(self, ctx: TenantContext) -> EpisodeResult:
        env = await ctx.open_env()
        rng = random.Random(self.seed)

        async def player(obs: Observation, note: str) -> Move:
            action = await env.oracle() if self.policy == "oracle" else None
            return action or Action.click(rng.randrange(obs.width), rng.randrange(obs.height))

        options = {"task": self.task} if self.task else None
        episode = await play_episode(env, player, seed=self.seed, options=options, max_turns=self.max_steps)
        info = episode.info
        success = bool(info.get("success"))
        return EpisodeResult(
            self.seed, info.get("task", self.task), episode.reward, len(episode.actions), success, episode.actions
        )
