"""The console script and ``python -m vlrl.cli`` in fresh interpreters: help, a training run and its
errors, and --help importing neither torch nor Ray. The CLI in this process is tests/unit/cli/test_cli.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

RECIPE = Path(__file__).parents[2] / "helpers" / "example_recipe.py"
SCRIPT = Path(sys.executable).with_name("vlrl")


def _vlrl(*args: str) -> subprocess.CompletedProcess:
    """The installed console script, falling back to ``python -m vlrl.cli`` where there is none."""
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "vlrl.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("command", [[], ["train"], ["rollout"], ["serve"], ["bench"]])
def test_console_script_help(command):
    done = _vlrl(*command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: vlrl {command[0]}" if command else "usage: vlrl ")


def test_console_script_trains_and_reports_errors(tmp_path):
    output = tmp_path / "report.txt"
    done = _vlrl("train", str(RECIPE), "--set", f"output={output}")
    assert (done.returncode, done.stderr) == (0, "")
    assert output.read_text() == "- alpha\n- beta\n"
    done = _vlrl("train", str(RECIPE), "--set", "repeat=-1")
    assert done.returncode == 2
    assert done.stderr == "error: config field 'repeat': got -1 (int); expected an integer >= 1\n"


def test_module_entry_point_and_light_imports():
    # `python -m vlrl.cli` works, and --help imports neither torch nor ray.
    code = (
        "import sys, runpy; sys.argv = ['vlrl', 'train', '--help']\n"
        "try: runpy.run_module('vlrl.cli', run_name='__main__')\n"
        "except SystemExit as e: assert e.code == 0, e.code\n"
        "assert not {'torch', 'ray'} & set(sys.modules), sorted({'torch', 'ray'} & set(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: vlrl train")
