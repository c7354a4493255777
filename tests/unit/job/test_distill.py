"""Where the teacher of on-policy distillation comes from, and the job's checks around it."""

from __future__ import annotations

import json
import shutil

import pytest

from vlrl.config import ConfigError
from vlrl.control.group_hook import GroupHook
from vlrl.job.distill import Teacher, check_same_tokenizer
from vlrl.job.run_folder import newest_checkpoint
from vlrl.job.train_job import TrainJob


def _checkpoint(run_dir, name, step, *, complete=True):
    folder = run_dir / "checkpoints" / name
    (folder / "hf").mkdir(parents=True)
    (folder / "hf" / "config.json").write_text("{}")
    if complete:
        (folder / "state.json").write_text(json.dumps({"step": step}))
    return folder


def test_a_run_folder_resolves_to_its_newest_complete_checkpoint(tmp_path):
    _checkpoint(tmp_path, "warm-start", 0)
    newest = _checkpoint(tmp_path, "step-000010", 10)
    _checkpoint(tmp_path, "step-000020", 20, complete=False)  # interrupted while saving
    assert newest_checkpoint(tmp_path) == newest
    assert Teacher(model_path=str(tmp_path)).resolve() == newest / "hf"
    assert Teacher(model_path=str(newest / "hf")).resolve() == newest / "hf"


def test_the_warm_start_checkpoint_counts_when_no_rl_step_was_saved(tmp_path):
    warm = _checkpoint(tmp_path, "warm-start", 0)
    assert Teacher(model_path=str(tmp_path)).resolve() == warm / "hf"


def test_a_folder_without_a_checkpoint_is_refused_by_field(tmp_path):
    with pytest.raises(ConfigError, match="'teacher.model_path'.*checkpoint folder"):
        Teacher(model_path=str(tmp_path / "nothing")).resolve()


def test_a_teacher_with_another_vocabulary_is_refused(tiny_path, tmp_path):
    from vlrl.models import build_tiny

    same = tmp_path / "same"
    shutil.copytree(tiny_path, same)
    check_same_tokenizer(tiny_path, same)
    other = build_tiny("qwen2_vl", tmp_path / "other", vocab_size=400)
    with pytest.raises(ConfigError, match="'teacher.model_path'.*policy's tokenizer"):
        check_same_tokenizer(tiny_path, other)


def test_opd_needs_a_teacher_and_a_teacher_needs_opd(tmp_path):
    config = TrainJob.Config()
    config.advantage = GroupHook.Config(mode="opd")
    with pytest.raises(ConfigError, match="'teacher'.*advantage.mode needs teacher scores"):
        config.check()
    config = TrainJob.Config(teacher=Teacher(model_path=str(tmp_path)))
    with pytest.raises(ConfigError, match="'advantage.mode'.*'opd'"):
        config.check()
