"""``ExternalRun``: one episode of an agent program, as a tenant of a loop host.

    endpoint up (loopback, random port and key) -> program started with OPENAI_BASE_URL,
    OPENAI_API_KEY, VLRL_TASK, VLRL_SEED -> its chat requests answered and traced -> program
    ends (or is killed at its time limit) -> reward read -> sequences written to the store once

Nothing is written to the store before the program has ended well, so a run that fails (it
crashed, hung, printed garbage, made no request, or the policy could not answer it) raises
``AgentFailed`` with its reason and leaves no key: the loop host reports it as a failed
outcome, and the driver fails its group with that reason (``control.driver``).

The task is ``env.tasks[seed % len(env.tasks)]`` when the source lists tasks, else '' (the
program picks one from the seed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vlrl.config import DataSource
from vlrl.pool.tenant import TenantContext
from vlrl.records import SeqMeta
from vlrl.rollout.agent_loop import AgentLoop
from vlrl.rollout.external.endpoint import MODEL_NAME, TracedEndpoint
from vlrl.rollout.external.program import AgentFailed, AgentReport, run_program
from vlrl.rollout.external.teacher import ProgramTeacher, Replies, TeacherReplies
from vlrl.rollout.external.tracer import ChatTracer
from vlrl.rollout.server.prompt import ChatTemplate

_STOP_TOKEN = "<|im_end|>"
"""Where a reply ends (the chat template's end of turn)."""


def task_of(source: DataSource, seed: int) -> str:
    tasks = source.env.tasks
    return tasks[seed % len(tasks)] if tasks else ""


@dataclass(frozen=True, slots=True)
class Played:
    """A program's run that ended well, not yet written to the store."""

    tracer: ChatTracer
    report: AgentReport
    task: str


@dataclass(frozen=True, slots=True)
class ExternalRun:
    starts_program = True
    """The pool bounds how many run at once (``HarnessPool.Config.max_programs_per_host``)."""

    source: DataSource
    seed: int
    group_id: str
    sample_index: int
    teacher: ProgramTeacher | Replies | None = None
    """Who answers the program's requests in place of the policy: a warm start's teacher, or
    scripted replies (``job.baselines``); None: the policy."""

    async def run(self, ctx: TenantContext) -> list[SeqMeta]:
        return await self.write(ctx, await self.play(ctx))

    async def play(self, ctx: TenantContext) -> Played:
        """Run the program to its end with its requests answered and traced; ``AgentFailed`` if it
        cannot be trained."""
        runtime = ctx.shared["runtime"]
        program = self.source.external
        if program is None:
            raise ValueError(f"source {self.source.name!r} has no external agent (DataSource.external)")
        trajectory_id = f"{self.group_id}/{self.sample_index}/{ctx.tenant_id}"
        template = ctx.shared.get("chat_template")
        if template is None:
            template = ctx.shared["chat_template"] = await ctx.to_thread(ChatTemplate, runtime.processor)
        task = task_of(self.source, self.seed)
        teacher = self.teacher
        if isinstance(teacher, ProgramTeacher):
            teacher = TeacherReplies(teacher, seed=self.seed, task=task)
        tracer = ChatTracer(
            trajectory_id,
            client=runtime.client,
            template=template,
            agent=self.source.agent,
            patch_rule=runtime.patch_rule,
            stop_token_id=runtime.tokenizer.convert_tokens_to_ids(_STOP_TOKEN),
            teacher=teacher,
        )
        endpoint = TracedEndpoint(tracer)
        try:
            url = await endpoint.start()
            env = {
                "OPENAI_BASE_URL": url,
                "OPENAI_API_KEY": endpoint.api_key,
                "VLRL_MODEL": MODEL_NAME,
                "VLRL_TASK": task,
                "VLRL_SEED": str(self.seed),
                "VLRL_TRAJECTORY": trajectory_id,
                "NO_PROXY": _no_proxy(),
            }
            report = await run_program(program, task=task, seed=self.seed, env=env)
        finally:
            await endpoint.stop()
            if teacher is None:
                await runtime.client.end_trajectory(trajectory_id)
        answerer = "policy" if teacher is None else "teacher (warm_start.teacher)"
        if tracer.failure is not None:
            raise AgentFailed(f"the {answerer} could not answer the agent: {tracer.failure}")
        if tracer.counts.requests == 0:
            refused = f" ({tracer.counts.refused} refused)" if tracer.counts.refused else ""
            raise AgentFailed(f"agent made no request the {answerer} answered{refused}: nothing to train")
        return Played(tracer, report, task)

    async def write(self, ctx: TenantContext, played: Played) -> list[SeqMeta]:
        """The run's sequences, written to the store once, with its reward."""
        runtime = ctx.shared["runtime"]
        return await ctx.to_thread(
            lambda: played.tracer.trajectory.finish(
                runtime.store,
                key=f"seq/{played.tracer.trajectory.trajectory_id}",
                group_id=self.group_id,
                source=self.source.name,
                sample_index=self.sample_index,
                reward=played.report.reward,
                success=played.report.success,
                finish="done",
                patch_rule=runtime.patch_rule,
                task=played.task,
                ledger=ctx.writes,
            )
        )


def _no_proxy() -> str:
    """Loopback never goes through a proxy the machine's environment names."""
    kept = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""
    return ",".join(filter(None, [kept, "127.0.0.1", "localhost"]))


def rollout_tenant(source: DataSource, seed: int, group_id: str, index: int) -> ExternalRun | AgentLoop:
    """The driver's tenant factory (``control.driver.TenantFactory``): the source's agent program,
    or else the Agent Loop."""
    if source.external is not None:
        return ExternalRun(source, seed=seed, group_id=group_id, sample_index=index)
    return AgentLoop(source, seed=seed, group_id=group_id, sample_index=index)
