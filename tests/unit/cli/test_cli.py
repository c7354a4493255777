import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import vlrl.bench
from vlrl.cli import main

RECIPE = Path(__file__).parents[2] / "helpers" / "example_recipe.py"


def test_train_runs_the_job_the_recipe_builds(tmp_path, capsys):
    output = tmp_path / "report.txt"
    assert main(["train", str(RECIPE), "--set", f"output={output}", "--set", "repeat=2"]) == 0
    assert output.read_text() == "- alpha\n- beta\n- alpha\n- beta\n"
    assert capsys.readouterr().err == ""


def test_train_selects_an_implementation_by_name(tmp_path):
    output = tmp_path / "report.json"
    argv = ["train", str(RECIPE), "--set", f"output={output}", "--set", "writer=JsonWriter", "--set", "items=a,b"]
    assert main(argv) == 0
    assert json.loads(output.read_text()) == ["a", "b"]


def test_train_runs_a_named_variant(tmp_path):
    output = tmp_path / "variant.json"
    assert main(["train", f"{RECIPE}:json_report", "--set", f"output={output}"]) == 0
    assert output.read_text() == '[\n  "alpha",\n  "beta"\n]'


def test_print_config_shows_values_and_docstrings_and_runs_nothing(tmp_path, capsys):
    output = tmp_path / "never.txt"
    assert main(["train", str(RECIPE), "--print-config", "--set", f"output={output}", "--set", "repeat=3"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# ReportJob.Config\n# A one-step job that writes a report.\n")
    assert f"# File the report is written to.\noutput = '{output}'  # str\n" in text
    assert "# Times the items are listed.\nrepeat = 3  # int (>= 1)\n" in text
    assert "writer = TextWriter  # TextWriter.Config | JsonWriter.Config\n" in text
    assert "  # Text written before each item.\n  writer.prefix = '- '  # str\n" in text
    assert not output.exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--set", "repeat=0"], "error: config field 'repeat': got 0 (int); expected an integer >= 1\n"),
        (
            ["--set", "repet=2"],
            "error: config field 'repet': got unknown key 'repet'; expected a field of ReportJob.Config: "
            "output, items, repeat, writer; did you mean 'repeat'?\n",
        ),
        (["--set", "repeat=twice"], "error: config field 'repeat': got 'twice'; expected an integer >= 1\n"),
        (
            ["--set", "writer=Json"],
            "error: config field 'writer': got 'Json'; expected the name of a config: TextWriter, JsonWriter; "
            "did you mean 'JsonWriter'?\n",
        ),
    ],
)
def test_config_errors_exit_2_with_one_line_and_no_traceback(argv, message, capsys):
    assert main(["train", str(RECIPE), *argv]) == 2
    assert capsys.readouterr().err == message


def test_recipe_errors_exit_2(tmp_path, capsys):
    assert main(["train", str(tmp_path / "missing.py")]) == 2
    assert capsys.readouterr().err == f"error: recipe file not found: {tmp_path / 'missing.py'}\n"
    assert main(["train", f"{RECIPE}:small"]) == 2
    assert "no function 'small'; functions defined there: json_report," in capsys.readouterr().err
    assert main(["train", f"{RECIPE}:not_a_config"]) == 2
    assert "returned {'output': 'report.txt'} (dict); expected a config" in capsys.readouterr().err


def test_a_config_that_builds_no_job_is_refused(capsys):
    assert main(["train", f"{RECIPE}:notes_only"]) == 2
    assert capsys.readouterr().err == (
        f"error: {RECIPE}:notes_only: Notes has no build(); a train recipe returns a config that builds a job\n"
    )
    assert main(["train", f"{RECIPE}:writer_only"]) == 2
    assert capsys.readouterr().err == (
        f"error: {RECIPE}:writer_only: TextWriter.Config.build() returned TextWriter, which has no run()\n"
    )


def test_serve_refuses_a_missing_checkpoint_and_a_bad_port(tmp_path, tiny_path, capsys):
    # Serving itself is tested in tests/rollout/server/.
    assert main(["serve", "--model", str(tmp_path / "missing"), "--port", "9000", "--api-key", "k"]) == 2
    assert capsys.readouterr().err == f"error: --model {tmp_path / 'missing'}: not a checkpoint directory\n"
    assert main(["serve", "--model", str(tmp_path), "--port", "9000"]) == 2
    assert "not a run folder (no sources.json), a checkpoint folder (no config.json)" in capsys.readouterr().err
    assert main(["serve", "--model", str(tiny_path), "--port", "70000"]) == 2
    assert capsys.readouterr().err == "error: config field 'port': got 70000 (int); expected an integer >= 0 and <= 65535\n"


@pytest.mark.parametrize(
    "command, expected",
    [
        ([], ["train", "rollout", "serve", "bench"]),
        (["train"], ["RECIPE", "--set KEY=VALUE", "--print-config", "path/to/recipe.py[:function]"]),
        (["rollout"], ["RECIPE", "--set KEY=VALUE", "--print-config", "Harness Pool"]),
        (["serve"], ["--model PATH", "--host", "127.0.0.1", "--port", "8000", "--api-key"]),
        (["bench"], ["--list", "--json", "--size"]),
        (["check"], ["{harness,encoder,model}", "ID", "vlrl check harness desktop", "vlrl check model qwen3_vl"]),
    ],
)
def test_help_of_each_command(command, expected, capsys):
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    for text in expected:
        assert text in out


def test_usage_errors_exit_2(capsys):
    assert main([]) == 2
    assert main(["serve"]) == 2  # --model is required
    assert "the following arguments are required: --model" in capsys.readouterr().err


def test_bench_is_delegated_to_the_bench_runner(monkeypatch):
    calls = []

    def add_arguments(parser):
        parser.add_argument("--rounds", type=int, default=1)

    def run(args):
        calls.append(args.rounds)
        return 7

    fake = SimpleNamespace(add_arguments=add_arguments, run=run)
    monkeypatch.setattr(vlrl.bench, "runner", fake, raising=False)
    monkeypatch.setitem(sys.modules, "vlrl.bench.runner", fake)
    assert main(["bench", "--rounds", "3"]) == 7
    assert calls == [3]


def test_bench_list_runs_the_real_runner(capsys):
    assert main(["bench", "--list"]) == 0
    assert capsys.readouterr().out.startswith("store")


@pytest.mark.parametrize(
    "kind, plugin_id, rules",
    [
        ("harness", "desktop", ["harness class", "task names", "thread_bound", "types", "determinism", "order", "bounds"]),
        ("encoder", "qwen2vl", ["output shape", "num_tokens", "cost monotone", "deterministic", "batch order", "gradients"]),
        ("model", "qwen3_vl", ["family class", "model types", "tiny build", "tower encoder: output shape", "tower rows"]),
    ],
)
def test_check_passes_a_builtin_and_prints_its_rules(kind, plugin_id, rules, capsys):
    assert main(["check", kind, plugin_id]) == 0
    out = capsys.readouterr().out
    for rule in rules:
        assert f"pass  {rule}\n" in out
    assert out.endswith(f"{kind} {plugin_id!r}: every rule passed\n")


def test_check_fails_a_broken_plugin_with_the_rule_name(capsys):
    from encoders import registry as encoders
    from vlrl.harness import register

    register("cli-endless", "tests.helpers.broken_plugins:Endless")
    assert main(["check", "harness", "cli-endless"]) == 1
    captured = capsys.readouterr()
    assert "pass  types\n" in captured.out and "pass  bounds" not in captured.out
    assert "FAIL  order: a fail action must terminate the episode\n" in captured.out
    assert captured.err == "error: harness 'cli-endless' breaks rule 'order': a fail action must terminate the episode\n"

    encoders.register("cli-noisy", "tests.unit.encoders.test_contract:Noisy")
    assert main(["check", "encoder", "cli-noisy"]) == 1
    out = capsys.readouterr().out
    assert "pass  cost monotone\n" in out and "FAIL  deterministic: two eval-mode forwards" in out


def test_check_fails_a_model_family_whose_tower_plug_in_normalises_otherwise(capsys):
    from vlrl.models import register
    from vlrl.models.registry import BUILTINS

    register("qwen3_vl", "tests.helpers.broken_plugins:WrongNorm", override=True)
    try:
        assert main(["check", "model", "qwen3_vl"]) == 1
    finally:
        register("qwen3_vl", BUILTINS["qwen3_vl"], override=True)
    out = capsys.readouterr().out
    assert "pass  tower encoder: gradients\n" in out and "FAIL  tower rows: the plug-in gives rows" in out


def test_check_takes_a_harness_by_its_module_path_before_anything_registers_it(capsys):
    assert main(["check", "harness", "tests.helpers.broken_plugins:Endless"]) == 1
    assert "FAIL  order: a fail action must terminate the episode\n" in capsys.readouterr().out
    assert main(["check", "harness", "no_such_module:Harness"]) == 2
    err = capsys.readouterr().err
    assert "cannot load no_such_module:Harness" in err and err.endswith("needs PYTHONPATH=.\n")
    assert main(["check", "encoder", "qwen2vl", "--recipe", "examples/train_click.py"]) == 2
    assert capsys.readouterr().err == "error: --recipe: only for a harness, not an encoder\n"


def test_check_of_an_unknown_id_lists_the_known_ones(capsys):
    assert main(["check", "harness", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: harness 'nope': not registered; known: [")
