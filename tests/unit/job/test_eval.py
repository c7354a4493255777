"""``vlrl eval`` without an engine: the refusal of a call that names nothing to evaluate, which
sources, episodes and seeds a run folder is evaluated on, and the report's rates, standard
errors and failure counts. The evaluations themselves are in
tests/e2e/job/test_eval.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from vlrl.cli import build_parser, main
from vlrl.config import ConfigError, DataSource, EnvSettings
from vlrl.job.eval_cli import eval_config
from vlrl.job.eval_report import build_report, markdown, rate
from vlrl.job.evaluate import EpisodeRecord, EvalResult, Evaluation
from vlrl.job.run_folder import EVALUATION_FILE, write_evaluation, write_sources


def test_vlrl_eval_without_tasks_or_policy_says_what_it_needs(capsys):
    assert main(["eval", "--episodes", "2"]) == 2
    assert "a run folder, a checkpoint folder, or --endpoint URL" in capsys.readouterr().err


def test_the_report_gives_rates_with_standard_errors_per_task_and_counts_failures():
    episodes = [
        EpisodeRecord("s", 0, "a", True, 1.0, 1, 5, "done"),
        EpisodeRecord("s", 1, "a", False, 0.0, 2, 7, "max_turns"),
        EpisodeRecord("s", 2, "b", True, 1.0, 1, 5, "done"),
        EpisodeRecord("s", 3, "", False, 0.0, 0, 0, "failed", "timeout: harness call ran longer than 5 s"),
    ]
    measured = {
        "seeds": [0, 3], "episodes": 4, "chance": 0.1, "constant": 0.5, "constant_point": [10, 20], "oracle": 1.0,
        "best": 0.5, "failed": 0, "tasks": {"a": {"chance": 0.0, "constant": 0.5, "oracle": 1.0}},
    }  # fmt: skip
    report = build_report(
        EvalResult(episodes=episodes), baselines={"s": measured}, about={"policy": "p", "seed": 0, "episodes_per_source": 4, "temperature": 0.0}
    )
    source = report["sources"]["s"]
    assert (source["chance"], source["constant"], source["oracle"]) == (0.1, 0.5, 1.0) and source["baselines"] == measured
    assert report["baselines"] == {"chance": 0.1, "constant": 0.5, "oracle": 1.0, "best": 0.5}
    assert source["episodes"] == 3 and source["failed"] == 1
    assert source["success"] == pytest.approx(2 / 3)
    assert source["stderr"] == pytest.approx(((2 / 3) * (1 / 3) / 3) ** 0.5)
    assert source["tasks"] == {"a": {**rate([True, False]), "chance": 0.0, "constant": 0.5, "oracle": 1.0}, "b": rate([True])}
    assert source["failures"] == {"timeout: harness call ran longer than 5 s": 1}
    page = markdown(report)
    assert "| s | all | 3 | 0.667 | 0.272 | 0.100 | 0.500 | 1.000 |" in page and "| s | a | 2 | 0.500 | 0.354 | 0.000 | 0.500 | 1.000 |" in page
    assert "| s | b | 1 | 1.000 | 0.000 |  |  |  |" in page and "the best constant point (clicked every turn) 0.500" in page and "1 x `timeout: harness call ran longer than 5 s`" in page


@pytest.fixture
def run_folder(tmp_path, tiny_path):
    """A run folder as ``vlrl train`` leaves it before its first checkpoint: the base model, the
    sources as trained (a --set override: width 200) and its evaluation settings."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "model").symlink_to(tiny_path)
    source = DataSource(name="desktop-click", codebase="desktop", env=EnvSettings(width=200, height=120, tasks=["click-target"]))
    write_sources(run, [source])
    write_evaluation(run, Evaluation(episodes=200, seed=5))
    return run


def _config(*argv: str):
    return eval_config(build_parser().parse_args(["eval", *argv]))


def test_a_run_is_evaluated_on_its_recorded_sources_and_episodes_unless_told_otherwise(run_folder, capsys):
    config = _config(str(run_folder))
    assert (config.eval.episodes, config.eval.seed) == (200, 5)  # the run's own evaluations' figure
    assert config.sources[0].env.width == 200
    config = _config(str(run_folder), "--recipe", "examples/train_click.py")
    assert config.sources[0].env.width == 200  # the recorded override, not the recipe's 160
    note = capsys.readouterr().err
    assert note.startswith("note: evaluating the run's own sources") and "sources[0].env.width" in note
    assert _config(str(run_folder), "--recipe", "examples/train_click.py", "--recipe-sources").sources[0].env.width == 160
    assert _config(str(run_folder), "--episodes", "8").eval.episodes == 8
    (run_folder / EVALUATION_FILE).unlink()  # a run from before the settings were recorded
    assert _config(str(run_folder)).eval.episodes == Evaluation().episodes


def test_an_unregistered_harness_names_the_recipe_route(run_folder, capsys):
    write_sources(run_folder, [DataSource(name="keypad", codebase="keypad_harness:KeypadHarness")])
    assert main(["eval", str(run_folder), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "'sources[0].codebase': got 'keypad_harness:KeypadHarness'" in err and "--recipe RECIPE" in err


def test_serve_and_eval_take_a_lora_adapter_folder_on_its_base(tiny_path, tmp_path, monkeypatch, capsys):
    """A LoRA checkpoint's ``adapter/`` (a PEFT folder) alone, on the base it records, or beside a
    base (``--adapter``): ``vlrl serve`` and ``vlrl eval`` get the base with the adapters merged in
    by PEFT, which equals the trainer's merged weights (its ``hf/``); the merged folder ``vlrl serve``
    wrote is gone once it ends."""
    import torch

    import vlrl.cli
    from vlrl.models import family_of
    from vlrl.train.lora import LoRA

    family = family_of(tiny_path)
    model = family.load(tiny_path)
    adapters = LoRA.Config(rank=2, llm_modules=("q_proj",), merger_modules=("mlp.0",), full_modules=("lm_head",)).build(model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name or name.startswith("lm_head."):
                param.add_(0.1 * torch.randn(param.shape, generator=generator))
    state = model.state_dict()
    folder = adapters.save_adapter(tmp_path / "step-000001" / "adapter", state, base_model=str(tiny_path))
    expected = adapters.merged_state(state)

    def check(policy) -> None:
        loaded = family.load(policy).state_dict()
        assert loaded.keys() == expected.keys()
        for name, value in expected.items():
            torch.testing.assert_close(loaded[name], value, rtol=0, atol=1e-6)
        assert (policy / "tokenizer.json").exists()  # the base's processor files

    served = []

    def serve_folder(args, policy):
        check(Path(policy))
        served.append((Path(policy), vlrl.cli._server_config(args, policy).served_model_name))
        return 0

    monkeypatch.setattr(vlrl.cli, "_serve_folder", serve_folder)
    assert main(["serve", "--model", str(folder)]) == 0
    assert main(["serve", "--model", str(tiny_path), "--adapter", str(folder)]) == 0
    assert [name for _, name in served] == [str(folder), str(tiny_path)]  # clients name what they asked for
    assert not any(policy.exists() for policy, _ in served)  # the merged folders are removed
    assert "merged into their base" in capsys.readouterr().err

    config = _config(str(folder), "--harness", "desktop", "--out", str(tmp_path / "eval"))
    assert (config.model_path, config.adapter) == (str(tiny_path), str(folder))  # the base it records
    assert not (tmp_path / "eval").exists()  # nothing merged before the job runs
    assert config.build().merged_adapter() == str(tmp_path / "eval" / "policy")
    check(tmp_path / "eval" / "policy")
    config = _config(str(tiny_path), "--adapter", str(folder), "--harness", "desktop", "--out", str(tmp_path / "eval2"))
    check(Path(config.build().merged_adapter()))
    with pytest.raises(ConfigError, match="'adapter'"):
        _config(str(tiny_path), "--adapter", str(tiny_path), "--harness", "desktop")

    assert main(["serve", "--model", str(folder), "--adapter", str(folder)]) == 2
    assert "--adapter goes beside the base model" in capsys.readouterr().err
    assert main(["serve", "--model", str(tiny_path), "--adapter", str(tiny_path)]) == 2
    assert "not a PEFT adapter folder" in capsys.readouterr().err
