"""On-policy distillation in the job: a teacher engine scores every rollout of the policy.

The teacher is an engine replica of another checkpoint (typically a stronger policy trained
earlier). ``control.teacher.TeacherScorer`` is the driver's grader: each finished trajectory is
scored by the teacher, images included, and the teacher's per-token logprobs land in the store
next to the rollout. ``GroupHook`` mode ``opd`` turns them into per-token advantages (teacher
minus student), or the loss adds the reverse KL to them (``PolicyLoss.Config.opd_coef``).
The teacher must read text the same way as the student: its tokenizer is checked at start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from vlrl.config import ConfigError, NonEmpty
from vlrl.job.run_folder import newest_checkpoint
from vlrl.rollout.engine import EmbeddedEngine


@dataclass(kw_only=True, slots=True)
class Teacher:
    """The teacher of on-policy distillation: a checkpoint served by its own engine replica."""

    model_path: Annotated[str, NonEmpty()]
    """A checkpoint folder of a supported model family (a checkpoint's ``hf/``), or the folder of an earlier
    ``vlrl train`` run: then its newest checkpoint's ``hf/`` is the teacher."""

    engine: EmbeddedEngine.Config = field(default_factory=lambda: EmbeddedEngine.Config(cpus=0))
    """The teacher replica's engine settings (the replica serves ``resolve()``'s checkpoint)."""

    def resolve(self) -> Path:
        """The checkpoint folder the teacher engine loads."""
        path = Path(self.model_path)
        if (path / "config.json").is_file():
            return path
        newest = newest_checkpoint(path)
        if newest is not None and (newest / "hf" / "config.json").is_file():
            return newest / "hf"
        raise ConfigError(
            "teacher.model_path",
            self.model_path,
            "a checkpoint folder (with config.json) or a vlrl train run folder with a complete checkpoint",
        )

    def start(self, student_path: str) -> Any:
        """Check the tokenizers agree, then start the teacher engine; returns its Ray handle."""
        path = self.resolve()
        check_same_tokenizer(student_path, path)
        return self.engine.build(model_path=str(path))


def check_same_tokenizer(student_path: str | Path, teacher_path: str | Path) -> None:
    """Teacher logprobs are per token of the student's sequence: both must use one vocabulary."""
    from transformers import AutoTokenizer

    student = AutoTokenizer.from_pretrained(student_path).get_vocab()
    teacher = AutoTokenizer.from_pretrained(teacher_path).get_vocab()
    if student != teacher:
        differ = sorted(set(student.items()) ^ set(teacher.items()))[:3]
        raise ConfigError(
            "teacher.model_path",
            str(teacher_path),
            f"a checkpoint with the policy's tokenizer ({len(student)} tokens); the teacher's has"
            f" {len(teacher)}, first differences {differ}",
        )
