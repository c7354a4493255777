"""A run folder's checkpoints: ``state.json`` vouches for the rest of its folder, and a resume
skips a broken checkpoint, saying why, for the newest intact one."""

from __future__ import annotations

import json
import re

import pytest

from vlrl.job.run_folder import (
    CHECKPOINTS,
    STATE_FILE,
    BrokenCheckpoint,
    newest_checkpoint,
    read_checkpoint_state,
    write_checkpoint_state,
)


def _checkpoint(run_dir, name, step):
    folder = run_dir / CHECKPOINTS / name
    (folder / "hf").mkdir(parents=True)
    (folder / "hf" / "model.safetensors").write_bytes(b"w" * 64)
    (folder / "trainer.pt").write_bytes(b"t" * 16)
    write_checkpoint_state(folder, {"step": step, "policy": str(folder / "hf")})
    return folder


def test_the_state_lists_every_other_file_and_reads_back_without_the_list(tmp_path):
    folder = _checkpoint(tmp_path, "step-000010", 10)
    written = json.loads((folder / STATE_FILE).read_text())
    assert written["files"] == {"hf/model.safetensors": 64, "trainer.pt": 16}
    assert read_checkpoint_state(folder) == {"step": 10, "policy": str(folder / "hf")}
    assert sorted(p.name for p in folder.iterdir()) == ["hf", STATE_FILE, "trainer.pt"]  # no temporary left


def _tear(folder):
    text = (folder / STATE_FILE).read_text()
    (folder / STATE_FILE).write_text(text[: len(text) // 2])


BREAKAGES = {
    "torn state": (_tear, "unreadable state.json"),
    "no state": (lambda f: (f / STATE_FILE).unlink(), "no state.json"),
    "not a state": (lambda f: (f / STATE_FILE).write_text('["step", 20]'), "not a checkpoint state"),
    "file missing": (lambda f: (f / "trainer.pt").unlink(), "trainer.pt is missing"),
    "file cut short": (
        lambda f: (f / "hf" / "model.safetensors").write_bytes(b"w" * 10),
        "has 10 bytes, state.json says 64",
    ),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_a_broken_newest_checkpoint_is_skipped_for_the_previous_intact_one(tmp_path, breakage):
    _checkpoint(tmp_path, "warm-start", 0)
    previous = _checkpoint(tmp_path, "step-000010", 10)
    newest = _checkpoint(tmp_path, "step-000020", 20)
    assert newest_checkpoint(tmp_path) == newest
    breaks, reason = BREAKAGES[breakage]
    breaks(newest)
    with pytest.warns(UserWarning, match=rf"{re.escape(str(newest))}: .*{reason}.*; skipped"):
        assert newest_checkpoint(tmp_path) == previous
    with pytest.raises(BrokenCheckpoint, match=reason):
        read_checkpoint_state(newest)


def test_with_every_checkpoint_broken_there_is_none(tmp_path):
    _tear(_checkpoint(tmp_path, "warm-start", 0))
    with pytest.warns(UserWarning, match="warm-start: unreadable state.json"):
        assert newest_checkpoint(tmp_path) is None
    assert newest_checkpoint(tmp_path / "elsewhere") is None


def test_a_run_started_from_a_missing_or_broken_checkpoint_is_refused_naming_the_field(tmp_path):
    from pathlib import Path

    from vlrl.config import ConfigError, load_recipe

    recipe = Path(__file__).resolve().parents[3] / "examples" / "train_click.py"
    folder = _checkpoint(tmp_path, "warm-start", 0)
    assert load_recipe(f"{recipe}:small", [f"start_from={folder}"]).start_from == str(folder)
    (folder / "trainer.pt").unlink()
    for start, why in ((folder, "trainer.pt is missing"), (tmp_path / "absent", "no state.json")):
        with pytest.raises(ConfigError) as caught:
            load_recipe(f"{recipe}:small", [f"start_from={start}"])
        assert caught.value.path == "start_from" and "intact checkpoint folder" in str(caught.value)
        assert why in str(caught.value)
