"""The Agent Loop: one trajectory as a tenant of a loop host.

observe -> prompt ids (the policy's answers stay as its own ids; a history window may drop old
screenshots) -> request (images as a delta) -> the exact sampled ids and logprobs -> decode only
to parse -> typed action -> harness step, until the harness ends the episode or the turn limit.
A reply that is not a well-formed action costs the source's format penalty and is answered with
feedback instead of a step. At the end the payload goes to the store once and the driver gets
``SeqMeta`` records: one per training sequence (one, unless a history window rewrote the context).
Each turn's request carries its own sampling seed (``turn_seed``): the engine seeds a stream per
request, so one seed per episode would draw every turn from the same random numbers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

from vlrl.config import AgentBehaviour, DataSource
from vlrl.harness import Observation
from vlrl.mm import PatchRule
from vlrl.pool.episode import Invalid, Move, play_episode
from vlrl.pool.tenant import TenantContext
from vlrl.records import SeqMeta
from vlrl.rollout.chat import ChatFormat, ChatTurn
from vlrl.rollout.client import InferenceClient
from vlrl.rollout.parsers import PARSERS, ParseError, ScreenMap
from vlrl.rollout.protocol import SamplingParams
from vlrl.rollout.screen_history import ScreenHistory
from vlrl.rollout.trajectory import Trajectory


@dataclass(slots=True)
class LoopRuntime:
    """What every Agent Loop of one loop host shares: one client, one tokenizer, one store client."""

    client: InferenceClient
    tokenizer: Any
    patch_rule: PatchRule
    store: Any
    processor: Any = None
    """The model's processor (its chat template renders an external agent's messages)."""
    _chats: dict[tuple[str, str], ChatFormat] = field(default_factory=dict)

    def chat_for(self, agent: AgentBehaviour) -> ChatFormat:
        key = (agent.prompt_template, agent.action_format)
        if key not in self._chats:
            describe = PARSERS[agent.action_format].describe()
            self._chats[key] = ChatFormat(self.tokenizer, self.patch_rule, agent.prompt_template, describe)
        return self._chats[key]

    def screen_map(self, width: int, height: int) -> ScreenMap:
        """The model sees the screenshot resized by the patch rule; points map back from that size."""
        _, grid_h, grid_w = self.patch_rule.grid(width, height)
        size = self.patch_rule.patch_size
        return ScreenMap(width, height, grid_w * size, grid_h * size)


@dataclass(frozen=True, slots=True)
class AgentLoop:
    source: DataSource
    seed: int
    group_id: str
    sample_index: int
    task: str | None = None

    async def run(self, ctx: TenantContext) -> list[SeqMeta]:
        runtime: LoopRuntime = ctx.shared["runtime"]
        agent = self.source.agent
        chat = runtime.chat_for(agent)
        parser = PARSERS[agent.action_format]
        trajectory_id = f"{self.group_id}/{self.sample_index}/{ctx.tenant_id}"
        sampling = SamplingParams(
            temperature=agent.temperature,
            top_p=agent.top_p,
            max_tokens=agent.max_tokens,
            stop_token_ids=chat.stop_token_ids,
        )
        trajectory = Trajectory(trajectory_id)
        turns: list[ChatTurn] = []
        screens = ScreenHistory(agent, runtime.patch_rule)

        async def policy(obs: Observation, note: str) -> Move:
            screen = await ctx.to_thread(screens.add, obs.screenshot, env.content_hash(obs.screenshot))
            turns.append(ChatTurn(note, (screen.width, screen.height)))
            shown, images = await ctx.to_thread(screens.shown)
            context = await ctx.to_thread(chat.context, turns, shown)
            trajectory.set_context(context, images)
            turn = len(turns) - 1
            result = await runtime.client.generate(
                trajectory_id,
                trajectory.current.prompt_array(),
                trajectory.current.images,
                replace(sampling, seed=turn_seed(trajectory_id, turn)),
                request_id=f"{trajectory_id}#{turn}",
            )
            trajectory.add_generated(result, obs.state_key or screen.content_hash)
            turns[-1].answer = [int(t) for t in result.token_ids]
            turns[-1].answer_stopped = result.finish_reason == "stop"
            reply = await ctx.to_thread(chat.decode, turns[-1].answer)
            try:
                return parser.parse(reply, runtime.screen_map(obs.width, obs.height))
            except ParseError as error:
                return Invalid(error.feedback)

        env = await ctx.open_env()
        try:
            episode = await play_episode(
                env,
                policy,
                seed=self.seed,
                options={"task": self.task} if self.task else None,
                max_turns=agent.max_turns,
                invalid_penalty=agent.format_penalty,
                repeat_goal=agent.goal_every_turn,
            )
        finally:
            await runtime.client.end_trajectory(trajectory_id)
        return await ctx.to_thread(
            lambda: trajectory.finish(
                runtime.store,
                key=f"seq/{trajectory_id}",
                group_id=self.group_id,
                source=self.source.name,
                sample_index=self.sample_index,
                reward=episode.reward,
                success=episode.success,
                finish=episode.finish,
                patch_rule=runtime.patch_rule,
                task=episode.task,
                turn_rewards=episode.turn_rewards,
                ledger=ctx.writes,
            )
        )

def turn_seed(trajectory_id: str, turn: int) -> int:
    """The sampling seed of one turn's request, in [0, 2**63): every request of a run draws its
    own random numbers, and a rerun of the run (the same task seeds, so the same trajectory ids)
    draws the same ones. A 64-bit hash, so that a large run's requests do not share seeds."""
    digest = hashlib.blake2b(f"{trajectory_id}#{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def agent_loop_factory(source: DataSource, seed: int, group_id: str, index: int) -> AgentLoop:
    """The driver's tenant factory (``control.driver.TenantFactory``) for policy rollouts."""
    return AgentLoop(source, seed=seed, group_id=group_id, sample_index=index)
