"""What ``vlrl train`` refuses before anything starts, beyond each section's own checks: settings
that conflict across sections (sources and engine, a warm start and agent programs, a teacher and
the loss, a checkpoint to start from and the steps). Each error names the field and the form it
expects; ``TrainJob.Config.check`` calls them in order."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from vlrl.config import ConfigError
from vlrl.job.action_text import FORMATS
from vlrl.job.run_folder import BrokenCheckpoint, read_checkpoint_state
from vlrl.records import SAMPLING_TEMPERATURE
from vlrl.rollout.engine import VLLMEngine
from vlrl.rollout.engine.sampling import sampled_fields
from vlrl.rollout.external.teacher import check_reachable
from vlrl.rollout.protocol import SamplingParams

if TYPE_CHECKING:
    from vlrl.job.train_job import TrainJob
    from vlrl.models import ModelFamily


def check_teacher_reachable(config: TrainJob.Config) -> None:
    """An agent program's warm-start teacher answers (a URL) or loads (a script), before Ray starts."""
    if config.warm_start is not None and config.warm_start.teacher is not None and not config.start_from:
        check_reachable(config.warm_start.teacher)


def check_start_from(config: TrainJob.Config) -> None:
    """A fresh run's starting checkpoint is intact, and the run goes past its step."""
    if config.start_from:
        try:
            start = read_checkpoint_state(Path(config.start_from))
        except BrokenCheckpoint as e:
            raise ConfigError(
                "start_from", config.start_from, "an intact checkpoint folder, such as runs/NAME/checkpoints/warm-start",
                hint=str(e),
            ) from None
        if config.steps <= start["step"]:
            raise ConfigError("steps", config.steps, f"more than the step of start_from's checkpoint ({start['step']})")


def check_external_sources(config: TrainJob.Config) -> None:
    """An agent program's warm start is played against a teacher (it has no oracle), vlrl has no
    random policy of it, and the program's own time limit must end it before its loop host's
    tenant timeout."""
    teacher = None if config.warm_start is None else config.warm_start.teacher
    if teacher is not None and all(source.external is None for source in config.sources):
        raise ConfigError("warm_start.teacher", "ProgramTeacher(...)", "None: no source is an agent program (DataSource.external)")
    for i, source in enumerate(config.sources):
        if source.external is None:
            continue
        if config.warm_start is not None and teacher is None:
            raise ConfigError(
                "warm_start.teacher", None,
                f"ProgramTeacher(script='teacher.py:function') or ProgramTeacher(url=...): sources[{i}] is an agent"
                " program, which has no oracle; its demonstrations are its own runs against a teacher (or warm_start=None)",
            )  # fmt: skip
        if config.eval.chance and source.agent.action_format not in FORMATS:
            raise ConfigError(
                f"sources[{i}].agent.action_format", source.agent.action_format,
                f"with eval.chance, the format the program parses clicks in, one of {FORMATS} (its baselines' clicks"
                " are written in it), or eval.chance=False",
            )  # fmt: skip
        limit = config.pool.loop_host.tenant_timeout_s  # past it the host, not the program's limit, would stop the run
        if source.external.time_limit_s >= limit:
            raise ConfigError(
                f"sources[{i}].external.time_limit_s", source.external.time_limit_s,
                f"less than pool.loop_host.tenant_timeout_s ({limit:g})",
            )  # fmt: skip


def check_demonstration_formats(config: TrainJob.Config) -> None:
    """A warm start writes demonstrations in each source's action format."""
    if config.warm_start is not None:
        for i, source in enumerate(config.sources):
            if source.external is None and source.agent.action_format not in FORMATS:  # a program's teacher writes its own
                raise ConfigError(
                    f"sources[{i}].agent.action_format",
                    source.agent.action_format,
                    f"a format demonstrations can be written in, one of {FORMATS} (or warm_start=None)",
                )


def check_sampling(config: TrainJob.Config) -> None:
    """The trainer scores each token under the distribution that sampled it, from what the
    engine stored beside the logprobs (``rollout.engine.sampling.sampled_fields``; both engines
    report them): sources packed into one micro-batch must carry the same ones (a sequence
    without a field cannot stand in for one with it)."""
    stored: tuple[str, ...] | None = None  # sources[0]'s fields
    for i, source in enumerate(config.sources):
        agent = source.agent
        fields = sampled_fields(SamplingParams(temperature=agent.temperature, top_p=agent.top_p))
        stored = fields if stored is None else stored
        if fields != stored:
            setting = "temperature" if (SAMPLING_TEMPERATURE in fields) != (SAMPLING_TEMPERATURE in stored) else "top_p"
            raise ConfigError(
                f"sources[{i}].agent.{setting}",
                getattr(agent, setting),
                f"a temperature and top_p that store the fields sources[0]'s do ({list(stored)}; temperature"
                " 0 or 1 stores no temperature, top_p 1 no nucleus): sequences packed together must carry"
                " the same fields",
            )


def check_routing_replay(config: TrainJob.Config, policy_family: ModelFamily) -> None:
    """Replay needs experts to route and an engine that records where they sent each token."""
    if config.loss.routing_replay == "off":
        return
    if not policy_family.routed_experts:
        raise ConfigError(
            "loss.routing_replay", config.loss.routing_replay,
            f"'off' for the {policy_family.name} family: its LLM has no mixture-of-experts layers to replay",
        )  # fmt: skip
    if isinstance(config.engine, VLLMEngine.Config):
        raise ConfigError(
            "loss.routing_replay", config.loss.routing_replay,
            "'off' with engine=VLLMEngine: it records no routed experts (vLLM's enable_return_routed_experts"
            " needs its model runner V2 and Triton, which its CPU build lacks); use the embedded engine",
        )  # fmt: skip


def check_teacher(config: TrainJob.Config) -> None:
    """A teacher is given exactly when on-policy distillation uses its scores."""
    uses = {
        "advantage.mode": config.advantage.mode == "opd",
        "loss.opd_coef": config.loss.opd_coef > 0,
    }
    if config.teacher is None:
        for name, used in uses.items():
            if used:
                raise ConfigError("teacher", None, f"a Teacher checkpoint: {name} needs teacher scores")
    elif not any(uses.values()):
        raise ConfigError(
            "advantage.mode",
            config.advantage.mode,
            "'opd' (or loss.opd_coef > 0) when a teacher is given; else teacher=None",
        )
