"""One tree of a branching rollout (``DataSource.branching``), as one loop-host tenant.

1. The root: one episode from ``reset(seed, options)``, played as the Agent Loop plays any, its
   moves and the state of every screen recorded (``PolicyPlayer.record``).
2. Branch points: ``points`` of the root's turns after the first (a branch restarts at turn ``t``,
   so the root's first ``t`` moves are its prefix), drawn uniformly or where the policy's mean
   surprisal was highest.
3. The budget: the tree may spend ``group_size / trees`` times its root's turns (a flat group's
   share, ``Branching.trees``); a branch from turn ``t`` is costed at the root's remaining
   ``L - t`` turns, and a point gets as many of its ``branches`` as still fit.
4. Each point's branches start on instances brought to turn ``t``: the root's own instance
   replays to it (``EnvSession.replay``, every screen checked), the others are forks of it where
   the harness forks, else replay too. A replay that diverges or a fork that fails is counted
   with its reason (naming the turn) and fails only that point's branches; the tree goes on.
5. The branches play on from turn ``t`` concurrently: the root's chat turns and screenshots up to
   ``t`` are their prompt, their own requests start at ``t`` with their own sampling seeds.
6. The prefix is paid once. On the wire, each branch starts as a fork of the root's trajectory
   (``InferenceClient.fork_trajectory``): the root's replica, the prefix's images by reference, and
   the replica's KV prefix of the root (kept until the tree ends) for the prompt they share. In
   the store, a branch writes only the rows after those it shares with the root
   (``SeqMeta.prefix_key``) and holds a reference to the root's key, which goes with the last of
   them (``SeqMeta.prefix_shared``).

Sample indices: tree ``i`` owns ``i * (1 + points * branches)`` (its root) and the indices after
it (its branches), so every trajectory of the group has its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from vlrl.config import Branching
from vlrl.pool.episode import Episode, Resume
from vlrl.pool.remote_errors import EnvCallError
from vlrl.pool.tenant import EnvSession, TenantContext
from vlrl.records import SeqMeta, TreeRollout
from vlrl.rollout.player import PolicyPlayer

if TYPE_CHECKING:
    from vlrl.rollout.agent_loop import AgentLoop


async def play_tree(loop: AgentLoop, ctx: TenantContext) -> TreeRollout:
    """Play the tree of tenant ``loop`` (module docstring); its sequences and branch books."""
    source, branching = loop.source, loop.source.branching
    assert branching is not None  # AgentLoop.run sends only a branching source here
    runtime = ctx.shared["runtime"]
    root_index = loop.sample_index * (1 + branching.points * branching.branches)
    env = await ctx.open_env()
    root = PolicyPlayer(runtime, source, loop.trajectory_id(ctx, root_index), env, ctx)
    try:
        episode = await loop.play(root, env, end=False)  # its replica's KV prefix serves the branches
        metas = list(await root.finish(episode, group_id=loop.group_id, sample_index=root_index))
        tree = _Tree(loop, ctx, root, episode, root_index, root.stored_rows(metas))
        turns = len(root.moves)
        budget = round(turns * source.group_size / branching.trees(source.group_size))
        spent = turns
        for point in branch_points(branching, root.surprisal, root.trajectory_id):
            fit = min(branching.branches, (budget - spent) // (turns - point))
            if fit < 1:
                continue
            spent += fit * (turns - point)
            metas += await tree.branch_at(point, fit)
    finally:
        await runtime.client.end_trajectory(root.trajectory_id)
    held = {meta.prefix_key for meta in metas}
    metas = [replace(meta, prefix_shared=True) if meta.key in held else meta for meta in metas]
    return TreeRollout(tuple(metas), tree.forks, tree.replays, tuple(tree.failures))


def branch_points(branching: Branching, surprisal: list[float], trajectory_id: str) -> list[int]:
    """The turns to branch at, ascending: ``points`` distinct turns of ``1 .. L-1`` (``L`` the
    root's turns), drawn uniformly with a generator seeded by the trajectory id (a rerun draws the
    same), or those of the highest surprisal (ties to the earlier turn)."""
    candidates = list(range(1, len(surprisal)))
    count = min(branching.points, len(candidates))
    if branching.choose == "entropy":
        chosen = sorted(candidates, key=lambda t: (-surprisal[t], t))[:count]
    else:
        digest = hashlib.blake2b(f"{trajectory_id}#branch-points".encode(), digest_size=8).digest()
        chosen = random.Random(int.from_bytes(digest, "big")).sample(candidates, count)
    return sorted(chosen)


class _Tree:
    """A root episode and the branches started from it so far, with their books."""

    def __init__(
        self,
        loop: AgentLoop,
        ctx: TenantContext,
        root: PolicyPlayer,
        episode: Episode,
        root_index: int,
        root_rows: tuple[tuple[str, list[int]], ...],
    ):
        self.loop, self.ctx, self.root, self.episode, self.root_index = loop, ctx, root, episode, root_index
        self.root_rows = root_rows
        """The root's stored sequences, ``(key, token ids)``: the branches' prefix rows are read there."""
        self.record = root.record(loop.seed, loop.options)
        self.spare: list[EnvSession] = []  # instances opened for replays, reused at later points
        self.started = 0  # branches started so far: the next one's sample index follows theirs
        self.forks = self.replays = 0
        self.failures: list[str] = []

    async def branch_at(self, turn: int, count: int) -> list[SeqMeta]:
        """Start ``count`` branches at ``turn`` and play them; their sequences."""
        root_env = self.root.env
        try:
            obs, info = await root_env.replay(self.record, turn)
        except EnvCallError as error:
            self.failures += [f"replay to turn {turn}: {_reason(error)}"] * count
            return []
        self.replays += 1
        starts: list[tuple[EnvSession, Any, dict[str, Any]]] = [(root_env, obs, info)]
        forked: list[EnvSession] = []
        for index in range(1, count):
            try:
                twin = await self.ctx.fork_env(root_env)
                if twin is not None:
                    self.forks += 1
                    forked.append(twin)
                    starts.append((twin, obs, info))  # a fork shows the same screen
                    continue
                while len(self.spare) < index:
                    self.spare.append(await self.ctx.open_env())
                spare = self.spare[index - 1]
                starts.append((spare, *await spare.replay(self.record, turn)))
                self.replays += 1
            except EnvCallError as error:
                self.failures.append(f"fork or replay to turn {turn}: {_reason(error)}")
        first = self.root_index + self.started + 1
        self.started += len(starts)
        played = await asyncio.gather(
            *(self._play_branch(first + i, turn, *start) for i, start in enumerate(starts)), return_exceptions=True
        )
        for twin in forked:  # the next point forks afresh
            await twin.release()
        errors = [p for p in played if isinstance(p, BaseException)]
        if errors:
            raise errors[0]  # a branch that failed while playing fails the tree, as a flat episode would
        return [meta for metas in played for meta in metas]

    async def _play_branch(
        self, index: int, turn: int, env: EnvSession, obs: Any, info: dict[str, Any]
    ) -> list[SeqMeta]:
        loop = self.loop
        player = self.root.branch(loop.trajectory_id(self.ctx, index), turn, env)
        player.runtime.client.fork_trajectory(self.root.trajectory_id, player.trajectory_id)
        resume = Resume(obs, info, self.root.turns[turn].text, turn, sum(self.episode.turn_rewards[:turn]))
        episode = await loop.play(player, env, resume)
        return await player.finish(
            episode, group_id=loop.group_id, sample_index=index, branch_of=(self.root_index, turn),
            prefix_from=self.root_rows,
        )  # fmt: skip


def _reason(error: EnvCallError) -> str:
    """The cause's message, first line (a ``ReplayDivergence`` names the turn)."""
    cause = getattr(error, "cause", None)
    text = str(cause) if cause is not None else str(error)
    return text.splitlines()[0] if text else type(error).__name__
