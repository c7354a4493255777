"""The Agent Loop: one trajectory as a tenant of a loop host.

observe -> prompt ids (the policy's answers stay as its own ids; a history window may drop old
screenshots) -> request (images as a delta) -> the exact sampled ids and logprobs -> decode only
to parse -> typed action -> harness step, until the harness ends the episode or the turn limit.
A reply that is not a well-formed action costs the source's format penalty and is answered with
feedback instead of a step. At the end the payload goes to the store once and the driver gets
``SeqMeta`` records: one per training sequence (one, unless a history window rewrote the context).
Each turn's request carries its own sampling seed (``turn_seed``): the engine seeds a stream per
request, so one seed per episode would draw every turn from the same random numbers. The turns
themselves are ``rollout.player``'s; a branching source's tenant plays a tree of episodes
(``rollout.branching``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vlrl.config import AgentBehaviour, DataSource
from vlrl.mm import PatchRule
from vlrl.pool.episode import Episode, Resume, play_episode
from vlrl.pool.tenant import EnvSession, TenantContext
from vlrl.records import SeqMeta, TreeRollout
from vlrl.rollout.branching import play_tree
from vlrl.rollout.chat import ChatFormat
from vlrl.rollout.client import InferenceClient
from vlrl.rollout.parsers import PARSERS, ScreenMap
from vlrl.rollout.player import PolicyPlayer, turn_seed

__all__ = ["AgentLoop", "LoopRuntime", "turn_seed"]


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

    async def run(self, ctx: TenantContext) -> list[SeqMeta] | TreeRollout:
        """One episode's sequences; a branching source's tree of episodes (``rollout.branching``)."""
        if self.source.branching is not None:
            return await play_tree(self, ctx)
        runtime: LoopRuntime = ctx.shared["runtime"]
        env = await ctx.open_env()
        player = PolicyPlayer(runtime, self.source, self.trajectory_id(ctx, self.sample_index), env, ctx)
        episode = await self.play(player, env)
        return await player.finish(episode, group_id=self.group_id, sample_index=self.sample_index)

    async def play(
        self, player: PolicyPlayer, env: EnvSession, resume: Resume | None = None, *, end: bool = True
    ) -> Episode:
        """Play ``player``'s episode on ``env`` (from ``resume``'s turn, for a branch), then end its
        trajectory on the engine whatever happened (``end``; a tree's root is ended by its tree,
        after its branches continued its KV prefix)."""
        agent = self.source.agent
        try:
            return await play_episode(
                env,
                player,
                seed=self.seed,
                options=self.options,
                max_turns=agent.max_turns,
                invalid_penalty=agent.format_penalty,
                repeat_goal=agent.goal_every_turn,
                resume=resume,
            )
        finally:
            if end:
                await player.runtime.client.end_trajectory(player.trajectory_id)

    @property
    def options(self) -> dict[str, Any] | None:
        """The episode's reset options."""
        return {"task": self.task} if self.task else None

    def trajectory_id(self, ctx: TenantContext, sample_index: int) -> str:
        """The id of the trajectory of ``sample_index`` this tenant plays (its store key's stem)."""
        return f"{self.group_id}/{sample_index}/{ctx.tenant_id}"
