"""``vlrl plot``, ``vlrl train --resume``, and the training commands the docs show (each names a
recipe function that exists and a config that validates, overrides included)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from PIL import Image

from tests.unit.job.test_metrics_and_plots import _fake_run
from vlrl.cli import main
from vlrl.config import load_recipe

ROOT = Path(__file__).resolve().parents[3]
DOCS = [
    "README.md", "examples/README.md", "docs/quickstart.md", "docs/training.md", "docs/lab/training-runs.md", "docs/cluster.md",
    "docs/vllm.md",
]
_COMMAND = re.compile(r"vlrl train (examples/\S+\.py(?::\w+)?)([^`|\n#]*)")


def _documented_commands() -> list[tuple[str, str, list[str]]]:
    found = []
    for doc in DOCS:
        for spec, rest in _COMMAND.findall((ROOT / doc).read_text()):
            words = shlex.split(rest)
            overrides = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--set"]
            # start_from names the checkpoint of a run the docs ran first: not there in a fresh clone
            overrides = [o for o in overrides if not o.startswith("start_from=")]
            found.append((doc, spec, overrides + (["resume=true"] if "--resume" in words else [])))
    return found


def test_the_docs_show_the_main_job_and_its_variants():
    specs = {spec for _, spec, _ in _documented_commands()}
    assert {"examples/train_click.py", "examples/train_click.py:small", "examples/train_click.py:mixed"} <= specs
    main_sh = (ROOT / "scripts" / "main.sh").read_text()
    assert "vlrl train examples/train_click.py" in main_sh


@pytest.mark.parametrize("doc, spec, overrides", _documented_commands(), ids=lambda v: str(v)[:60])
def test_every_documented_training_command_loads_and_validates(doc, spec, overrides):
    path, _, function = spec.partition(":")
    config = load_recipe(f"{ROOT / path}:{function}" if function else str(ROOT / path), overrides)
    assert config.steps >= 1, doc


def test_plot_writes_the_plots_of_a_run_folder(tmp_path, capsys):
    _fake_run(tmp_path)
    assert main(["plot", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split()
    assert str(tmp_path / "plots" / "overview.png") in printed and len(printed) == 7


def test_plot_of_several_runs_writes_their_comparison_beside_them(tmp_path, capsys):
    for name, steps in (("grpo", 6), ("step_credit", 9)):
        (tmp_path / name).mkdir()
        _fake_run(tmp_path / name, steps=steps)
    assert main(["plot", str(tmp_path / "grpo"), str(tmp_path / "step_credit")]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "compare.png")]
    assert Image.open(tmp_path / "compare.png").size == (1200, 450)
    assert not (tmp_path / "grpo" / "plots").exists()  # each run's own plots are not rewritten
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "grpo"), str(tmp_path / "empty"), "--out", str(tmp_path / "x.png")]) == 2
    assert "empty: no metrics.jsonl records" in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "grpo"), "--out", str(tmp_path / "x.png")]) == 2
    assert "only for a comparison" in capsys.readouterr().err


def test_plot_refuses_what_is_not_a_run_folder(tmp_path, capsys):
    assert main(["plot", str(tmp_path / "missing")]) == 2
    assert "not a run folder" in capsys.readouterr().err
    assert main(["plot", str(tmp_path)]) == 2
    assert "no metrics.jsonl records" in capsys.readouterr().err


def test_resume_is_a_validated_override_of_the_recipe(capsys):
    recipe = str(ROOT / "examples" / "train_click.py")
    assert main(["train", f"{recipe}:small", "--resume", "--print-config"]) == 0
    assert re.search(r"^resume\s*[:=]?\s*true", capsys.readouterr().out, re.MULTILINE | re.IGNORECASE)
    assert main(["train", str(ROOT / "examples" / "policy_rollout.py"), "--resume"]) == 2
    assert "resume" in capsys.readouterr().err
