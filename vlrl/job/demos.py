"""Oracle demonstrations as training sequences, for the optional supervised warm start.

A ``DemoEpisode`` is a tenant of the Harness Pool like an Agent Loop, and builds its sequence
the same way (same chat format, same screenshots, same ``Trajectory`` split into payload and
``SeqMeta``), except that each answer is the harness oracle's action written as the reply the
policy should give (``action_text``), not a sample. The reply is parsed back and the parsed
action is what the harness runs, so a demonstration is exactly what the policy would have done
had it written that text. Only episodes that end in success are kept; their loss mask covers the
demonstrated reply tokens. They get no advantages, and their rollout logprobs are zero: the
warm start's likelihood loss packs neither (``records.fields_for``).

An agent program of the user's own (``DataSource.external``) has no oracle: a ``ProgramDemo``
runs the program against ``WarmStart.teacher`` instead (``rollout.external.teacher``), traced
token for token exactly as in RL, and keeps the run's sequences when the program reports success.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from typing import Annotated

from vlrl.config import DataSource, Ge, Gt
from vlrl.config.moved import moved_fields
from vlrl.harness import Observation
from vlrl.job.action_text import demo_answer, demo_reply
from vlrl.job.grounding import grounding_trajectories
from vlrl.pool.episode import Move, Stop, play_episode
from vlrl.pool.tenant import TenantContext
from vlrl.records import SeqMeta
from vlrl.rollout.agent_loop import LoopRuntime
from vlrl.rollout.chat import ChatTurn
from vlrl.rollout.external.run import ExternalRun
from vlrl.rollout.external.teacher import ProgramTeacher
from vlrl.rollout.screen_history import ScreenHistory
from vlrl.rollout.trajectory import Trajectory
from vlrl.train.optimizer import Schedule

DEMO_SEED_BASE = 500_000
"""Demonstrations use task seeds from here on; training groups start at 0, evaluation at
``Evaluation.Config.seed``: the three never meet."""


@dataclass(kw_only=True, slots=True)
class WarmStart(moved_fields("warm_start")):
    """Supervised warm start on harness oracle demonstrations (loss kind ``sft``), before RL. A
    recipe that reads or sets a field that has moved (``lr_schedule``) is told its new name."""

    episodes: Annotated[int, Ge(1)] = 256
    """Oracle episodes per data source; failed or unwritable ones are dropped."""

    steps: Annotated[int, Ge(1)] = 100
    """Optimizer steps of the warm start."""

    sequences_per_step: Annotated[int, Ge(1)] = 32
    """Demonstration sequences per step, drawn without replacement within an epoch."""

    lr: Annotated[float, Gt(0)] = 3e-3
    """AdamW learning rate of the warm start (the RL stage's is ``optim.lr``; the rest of
    ``optim`` applies to both)."""

    schedule: Schedule = "constant"
    """The warm start's learning-rate schedule, spelled as ``optim.schedule``: ``cosine`` falls
    from ``lr`` to ``optim.min_lr_ratio * lr`` over ``steps``."""

    point_grid: Annotated[int, Ge(1)] = 7
    """Demonstrated points are rounded to multiples of this many pixels of the model's image (1:
    exact), so that each coordinate is one token of the tiny model's tokenizer."""

    seed: Annotated[int, Ge(0)] = DEMO_SEED_BASE
    """Task seed of the first demonstration."""

    lora: bool = True
    """With ``lora.rank > 0``, whether the warm start trains the run's adapters too (True) or
    every weight (False); either way the RL stage puts fresh adapters on the warm start's result."""

    eval_every: Annotated[int, Ge(0)] = 0
    """Warm-start steps between held-out evaluations during it (0: only at its end), logged with
    the warm start's steps beside its loss: a loss that falls while held-out success does not
    shows early."""

    continue_below_baseline: bool = False
    """Run RL even when the warm start's held-out success does not beat the best baseline (random
    clicks or the best constant point, on the same seeds) by more than one standard error
    (``job.baselines.below_baseline``); by default the job stops there, saying so with the
    figures. Smoke runs, which test the stages and not learning, set it."""

    grounding: Annotated[int, Ge(0)] = 0
    """Grounding demonstrations per demonstrated turn (``job.grounding``): one-turn sequences
    'Click "<label>".' on that turn's screen, each answered by a click on a different labelled
    element the harness reports (``Observation.elements``; a harness reporting none gives none).
    They teach a model trained from random weights to find named words on the screen; 0: none."""

    teacher: ProgramTeacher | None = None
    """Who plays an agent program's demonstrations (needed when a source is ``external``): its
    ``episodes`` runs from ``seed`` on get their replies from this scripted policy or endpoint,
    and the runs the program reports a success are kept (docs/train-your-agent.md)."""


@dataclass(frozen=True, slots=True)
class DemoResult:
    metas: tuple[SeqMeta, ...] = ()
    reason: str = ""
    """Why the episode gave no demonstration ('' when it did)."""


@dataclass(frozen=True, slots=True)
class DemoEpisode:
    """One oracle episode on ``source``'s harness, written to the store as training sequences."""

    source: DataSource
    seed: int
    point_grid: int = 1
    grounding: int = 0
    """Grounding demonstrations per turn (``WarmStart.grounding``)."""
    sample_index: int = 0

    async def run(self, ctx: TenantContext) -> DemoResult:
        runtime: LoopRuntime = ctx.shared["runtime"]
        agent = self.source.agent
        chat = runtime.chat_for(agent)
        trajectory_id = f"demo/{self.source.name}/{self.seed}"
        env = await ctx.open_env()
        trajectory = Trajectory(trajectory_id)
        turns: list[ChatTurn] = []
        screens = ScreenHistory(agent, runtime.patch_rule)
        grounding: list[Trajectory] = []
        rng = random.Random(self.seed)

        async def oracle(obs: Observation, note: str) -> Move:
            action = await env.oracle()
            if action is None:
                return Stop("the harness has no oracle")
            screen = runtime.screen_map(obs.width, obs.height)
            try:
                reply, parsed = demo_reply(action, agent.action_format, screen, grid=self.point_grid)
            except ValueError as error:  # UnwritableAction or ParseError
                return Stop(f"{action.kind} not writable: {error}"[:120])
            screen_image = await ctx.to_thread(screens.add, obs.screenshot, env.content_hash(obs.screenshot))
            turns.append(ChatTurn(note, (screen_image.width, screen_image.height)))
            shown, images = await ctx.to_thread(screens.shown)
            context = await ctx.to_thread(chat.context, turns, shown)
            trajectory.set_context(context, images)
            answer = demo_answer(reply, runtime.tokenizer, chat.stop_token_ids[0], f"{trajectory_id}#{len(turns) - 1}")
            trajectory.add_generated(answer)
            turns[-1].answer = [int(t) for t in answer.token_ids]
            if self.grounding:
                grounding.extend(grounding_trajectories(
                    obs.elements,
                    screen_image,
                    count=self.grounding,
                    rng=rng,
                    trajectory_id=f"{trajectory_id}#{len(turns) - 1}",
                    chat=chat,
                    tokenizer=runtime.tokenizer,
                    action_format=agent.action_format,
                    screen=screen,
                    point_grid=self.point_grid,
                ))
            return parsed

        episode = await play_episode(env, oracle, seed=self.seed, max_turns=agent.max_turns, repeat_goal=agent.goal_every_turn)
        if episode.stopped:
            return DemoResult(reason=episode.stopped)
        if not episode.success:
            return DemoResult(reason="the demonstrated episode did not succeed")

        def write() -> tuple[SeqMeta, ...]:
            metas = []
            for written in [trajectory, *grounding]:
                metas += written.finish(
                    runtime.store,
                    key=f"seq/{written.trajectory_id}",
                    group_id=written.trajectory_id,
                    source=self.source.name,
                    sample_index=self.sample_index,
                    reward=episode.reward,
                    success=True,
                    finish=episode.finish,
                    patch_rule=runtime.patch_rule,
                    task=episode.task,
                )
            return tuple(metas)

        return DemoResult(metas=await ctx.to_thread(write))


@dataclass(frozen=True, slots=True)
class ProgramDemo:
    """One run of ``source``'s agent program against ``teacher``, traced; written to the store
    only when the program reports a success."""

    starts_program = True
    """Bounded like the RL stage's runs (``HarnessPool.Config.max_programs_per_host``)."""

    source: DataSource
    seed: int
    teacher: ProgramTeacher

    async def run(self, ctx: TenantContext) -> DemoResult:
        group_id = f"demo/{self.source.name}/{self.seed}"
        run = ExternalRun(self.source, seed=self.seed, group_id=group_id, sample_index=0, teacher=self.teacher)
        played = await run.play(ctx)
        if not played.report.success:
            return DemoResult(reason="the program did not report a success")
        return DemoResult(metas=tuple(await run.write(ctx, played)))


def demo_tenant(source: DataSource, seed: int, warm_start: WarmStart) -> DemoEpisode | ProgramDemo:
    """The oracle's episode on a harness source, or the program's run against the teacher."""
    if source.external is not None:
        if warm_start.teacher is None:
            raise ValueError(f"source {source.name!r} is an agent program: its warm start needs warm_start.teacher")
        return ProgramDemo(source, seed=seed, teacher=warm_start.teacher.located())
    return DemoEpisode(source, seed=seed, point_grid=warm_start.point_grid, grounding=warm_start.grounding)


def unkept_sources(sources: list[DataSource], tenants: list[DemoEpisode | ProgramDemo], outcomes: list) -> str:
    """What to say when an agent program's source kept no demonstration ('' when each kept one):
    its count of runs and why each was dropped, by reason."""
    lines = []
    for i, source in enumerate(sources):
        if source.external is None:
            continue
        mine = [o for t, o in zip(tenants, outcomes) if t.source.name == source.name]
        if any(o.status == "ok" and o.value.metas for o in mine):
            continue
        reasons = Counter(
            o.value.reason if o.status == "ok" else f"{o.status}: {(o.error or 'no error').splitlines()[0]}" for o in mine
        )
        lines.append(
            f"sources[{i}] ({source.name!r}, an agent program) kept 0 of {len(mine)} runs against warm_start.teacher"
            f" ({dict(reasons)}); check that the teacher's replies are what the program parses and that they win"
        )
    return "; ".join(lines)
