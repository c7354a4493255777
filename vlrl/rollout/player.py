"""The policy as an episode player: one trajectory's turns, screens and sequences as they grow.

Each turn: the screenshot joins the screen history, the chat context is rebuilt (the policy's
answers stay its own ids), the request goes out with its own sampling seed (``turn_seed``), the
exact sampled ids and logprobs join the trajectory, and the reply is parsed strictly into a move.
The player also records what replaying its episode needs (``EpisodeRecord``: each turn's move and
the state of the screen it was made on), and ``branch`` starts another trajectory that shares its
first turns (a branching rollout's branch): the same chat turns and screens, a fresh trajectory
whose first request carries that prefix as prompt.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from vlrl.config import DataSource
from vlrl.harness import Action, Observation
from vlrl.harness.fork import EpisodeRecord
from vlrl.pool.episode import Episode, Invalid, Move
from vlrl.pool.tenant import EnvSession, TenantContext
from vlrl.records import SeqMeta
from vlrl.rollout.chat import ChatTurn
from vlrl.rollout.parsers import PARSERS, ParseError
from vlrl.rollout.protocol import SamplingParams
from vlrl.rollout.screen_history import ScreenHistory
from vlrl.rollout.trajectory import Trajectory

if TYPE_CHECKING:
    from vlrl.rollout.agent_loop import LoopRuntime


@dataclass(slots=True)
class PolicyPlayer:
    """``(observation, note) -> move`` for ``play_episode``, on one trajectory."""

    runtime: LoopRuntime
    source: DataSource
    trajectory_id: str
    env: EnvSession
    ctx: TenantContext
    turns: list[ChatTurn] = field(default_factory=list)
    screens: ScreenHistory | None = None
    moves: list[Action | None] = field(default_factory=list)
    """What each turn sent the harness (None: a reply that did not parse)."""
    states: list[str] = field(default_factory=list)
    """The state of the screen each turn was made on (``state_of``)."""
    surprisal: list[float] = field(default_factory=list)
    """Each turn's mean ``-logprob`` of the tokens the policy sampled (where it was least sure)."""
    trajectory: Trajectory = field(init=False)

    def __post_init__(self) -> None:
        self.trajectory = Trajectory(self.trajectory_id)
        if self.screens is None:
            self.screens = ScreenHistory(self.source.agent, self.runtime.patch_rule)

    async def __call__(self, obs: Observation, note: str) -> Move:
        runtime, agent = self.runtime, self.source.agent
        chat = runtime.chat_for(agent)
        screen = await self.ctx.to_thread(self.screens.add, obs.screenshot, self.env.content_hash(obs.screenshot))
        state = obs.state_key or screen.content_hash
        self.turns.append(ChatTurn(note, (screen.width, screen.height)))
        shown, images = await self.ctx.to_thread(self.screens.shown)
        context = await self.ctx.to_thread(chat.context, self.turns, shown)
        self.trajectory.set_context(context, images)
        turn = len(self.turns) - 1
        sampling = SamplingParams(
            temperature=agent.temperature,
            top_p=agent.top_p,
            max_tokens=agent.max_tokens,
            stop_token_ids=chat.stop_token_ids,
            seed=turn_seed(self.trajectory_id, turn),
        )
        result = await runtime.client.generate(
            self.trajectory_id,
            self.trajectory.current.prompt_array(),
            self.trajectory.current.images,
            sampling,
            request_id=f"{self.trajectory_id}#{turn}",
        )
        self.trajectory.add_generated(result, state)
        self.states.append(state)
        logprobs = np.asarray(result.logprobs, dtype=np.float64)
        self.surprisal.append(float(-logprobs.mean()) if logprobs.size else 0.0)
        self.turns[-1].answer = [int(t) for t in result.token_ids]
        self.turns[-1].answer_stopped = result.finish_reason == "stop"
        reply = await self.ctx.to_thread(chat.decode, self.turns[-1].answer)
        try:
            move = PARSERS[agent.action_format].parse(reply, runtime.screen_map(obs.width, obs.height))
        except ParseError as error:
            move = Invalid(error.feedback)
        self.moves.append(move if isinstance(move, Action) else None)
        return move

    def stored_rows(self, metas: list[SeqMeta]) -> tuple[tuple[str, list[int]], ...]:
        """``(store key, token ids)`` of each sequence ``finish`` wrote (``metas``, its answer)."""
        answered = [s for s in self.trajectory.sequences if s.context_lengths]
        return tuple((meta.key, sequence.token_ids) for meta, sequence in zip(metas, answered, strict=True))

    def record(self, seed: int, options: dict[str, Any] | None) -> EpisodeRecord:
        """What replaying this player's episode to any of its turns needs."""
        return EpisodeRecord(seed, options, tuple(self.moves), tuple(self.states))

    def branch(self, trajectory_id: str, turn: int, env: EnvSession) -> PolicyPlayer:
        """A player for a new trajectory that shares this one's first ``turn`` turns (their chat
        turns and screenshots) and plays on ``env``, an instance brought to that turn."""
        screens = ScreenHistory(self.source.agent, self.runtime.patch_rule)
        screens.images = list(self.screens.images[:turn])
        turns = [replace(t, answer=list(t.answer or [])) for t in self.turns[:turn]]
        return PolicyPlayer(
            self.runtime, self.source, trajectory_id, env, self.ctx, turns, screens,
            list(self.moves[:turn]), list(self.states[:turn]),
        )  # fmt: skip

    async def finish(
        self,
        episode: Episode,
        *,
        group_id: str,
        sample_index: int,
        branch_of: tuple[int, int] = (),
        prefix_from: tuple[tuple[str, list[int]], ...] = (),
    ) -> list[SeqMeta]:
        """Write the trajectory's payload to the store once; its ``SeqMeta`` records. A branch's
        ``prefix_from`` (its root's ``stored_rows``): the rows it shares with them are not written
        again (``Trajectory.finish``)."""
        runtime = self.runtime
        return await self.ctx.to_thread(
            lambda: self.trajectory.finish(
                runtime.store,
                key=f"seq/{self.trajectory_id}",
                group_id=group_id,
                source=self.source.name,
                sample_index=sample_index,
                reward=episode.reward,
                success=episode.success,
                finish=episode.finish,
                patch_rule=runtime.patch_rule,
                task=episode.task,
                turn_rewards=episode.turn_rewards,
                branch_of=branch_of,
                prefix_from=prefix_from,
                ledger=self.ctx.writes,
            )
        )


def turn_seed(trajectory_id: str, turn: int) -> int:
    """The sampling seed of one turn's request, in [0, 2**63): every request of a run draws its
    own random numbers, and a rerun of the run (the same task seeds, so the same trajectory ids)
    draws the same ones. A 64-bit hash, so that a large run's requests do not share seeds. A
    branch has its own trajectory id, so its first turn draws anew where its root drew before."""
    digest = hashlib.blake2b(f"{trajectory_id}#{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1
