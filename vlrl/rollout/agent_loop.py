"""The Agent Loop: one trajectory as a tenant of a loop host.

observe -> prompt ids (only the new turn is tokenized) -> request (images as a delta) -> the
exact sampled ids and logprobs -> decode only to parse -> typed action -> harness step, until
the harness ends the episode or the turn limit. A reply that is not a well-formed action costs
the source's format penalty and is answered with feedback instead of a step. At the end the
payload goes to the store once and the driver gets a ``SeqMeta``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from vlrl.harness import ActionError
from vlrl.mm import PatchRule
from vlrl.pool.sources import AgentBehaviour, DataSource
from vlrl.pool.tenant import TenantContext
from vlrl.rollout.chat import ChatFormat
from vlrl.rollout.client import ContextImage, InferenceClient
from vlrl.rollout.parsers import PARSERS, ParseError, ScreenMap
from vlrl.rollout.protocol import SamplingParams
from vlrl.rollout.trajectory import Trajectory
from vlrl.store.records import Finish, SeqMeta


@dataclass(slots=True)
class LoopRuntime:
    """What every Agent Loop of one loop host shares: one client, one tokenizer, one store client."""

    client: InferenceClient
    tokenizer: Any
    patch_rule: PatchRule
    store: Any
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

    async def run(self, ctx: TenantContext) -> SeqMeta:
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
            seed=zlib.crc32(trajectory_id.encode()),
        )
        env = await ctx.open_env()
        obs, info = await env.reset(seed=self.seed, options={"task": self.task} if self.task else None)
        trajectory = Trajectory(trajectory_id)
        finish: Finish = "max_turns"
        reward, success, feedback = 0.0, False, ""
        try:
            for turn in range(agent.max_turns):
                image = await ctx.to_thread(ContextImage.of, obs.screenshot)
                size = (image.width, image.height)
                if turn == 0:
                    segment = await ctx.to_thread(chat.first_turn, obs.goal or "", size)
                else:
                    segment = await ctx.to_thread(
                        lambda: chat.next_turn(feedback, size, previous_ended=trajectory.ended_with_stop)
                    )
                trajectory.add_prompt(segment, [image])
                result = await runtime.client.generate(
                    trajectory_id,
                    trajectory.prompt_array(),
                    trajectory.images,
                    sampling,
                    request_id=f"{trajectory_id}#{turn}",
                )
                trajectory.add_generated(result)
                text = await ctx.to_thread(chat.decode, [int(t) for t in result.token_ids])
                try:
                    action = parser.parse(text, runtime.screen_map(obs.width, obs.height))
                    obs, step_reward, terminated, truncated, info = await env.step(action)
                except (ParseError, ActionError) as error:
                    reward -= agent.format_penalty
                    feedback = f"Invalid action: {getattr(error, 'feedback', str(error))}"
                    continue
                reward += step_reward
                feedback = ""
                if terminated or truncated:
                    finish = "done" if terminated else "truncated"
                    success = bool(info.get("success", step_reward > 0))
                    break
        finally:
            await runtime.client.end_trajectory(trajectory_id)
        return await ctx.to_thread(
            lambda: trajectory.finish(
                runtime.store,
                key=f"seq/{trajectory_id}",
                group_id=self.group_id,
                source=self.source.name,
                sample_index=self.sample_index,
                reward=reward,
                success=success,
                finish=finish,
                patch_rule=runtime.patch_rule,
            )
        )

