"""``vlrl serve`` and ``vlrl eval`` are configured like ``vlrl train``: their flags set fields of
their configs (``OpenAIServer.Config``, ``EvalJob.Config``), ``--set`` sets any, and no flag restates
a default the config holds (``vlrl.config.flags``)."""

from __future__ import annotations

import argparse

import pytest

from vlrl.cli import _server_config, build_parser, main
from vlrl.config import ConfigError, validate
from vlrl.job.eval_cli import EVAL_FLAGS
from vlrl.job.eval_job import EvalJob
from vlrl.rollout.server import OpenAIServer


def _subparser(name: str) -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices[name]


@pytest.mark.parametrize("command", ["serve", "eval"])
def test_no_flag_restates_a_default(command):
    """A flag's default is 'not given' (the config's own applies), None for a value with no config
    field, False for a switch, [] for --set; a flag with any other default restates one."""
    restated = [
        (action.option_strings, action.default)
        for action in _subparser(command)._actions
        if action.option_strings and action.default not in (argparse.SUPPRESS, None, False, [])
    ]
    assert restated == []


def test_serve_help_shows_the_configs_defaults(capsys):
    assert main(["serve", "--help"]) == 0
    help_ = " ".join(capsys.readouterr().out.split())
    defaults = OpenAIServer.Config(model_path="")
    assert f"(--set engine.max_batch; default: {defaults.engine.max_batch})" in help_
    assert f"(--set max_queued; default: {defaults.max_queued})" in help_
    assert f"(--set port; default: {defaults.port})" in help_


def _serve_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", "--model", "ckpt", *argv])


def test_serve_flags_and_sets_set_the_server_config(tiny_path):
    args = _serve_args(
        "--max-batch", "4", "--port", "0", "--dtype", "bfloat16", "--allow-remote-images", "a.example",
        "--allow-remote-images", "b.example", "--set", "max_uuids=10", "--set", "engine.max_batch=6",
    )  # fmt: skip
    config = _server_config(args, str(tiny_path))
    assert (config.engine.max_batch, config.port, config.engine.dtype, config.max_uuids) == (6, 0, "bfloat16", 10)
    assert config.remote_image_hosts == ("a.example", "b.example")
    assert config.served_model_name == "ckpt"  # the folder asked for, not the one served
    assert _server_config(_serve_args(), str(tiny_path)).engine == validate(OpenAIServer.Config(model_path=str(tiny_path))).engine


def test_a_bad_serve_flag_is_named_by_its_field(tiny_path):
    with pytest.raises(ConfigError, match=r"'engine.dtype': got 'float8'"):
        _server_config(_serve_args("--dtype", "float8"), str(tiny_path))


def test_eval_flags_are_the_eval_configs_fields():
    defaults = EvalJob.Config()
    for flag in EVAL_FLAGS:
        node = defaults
        for part in flag.path.split("."):
            node = getattr(node, part)  # the path exists in the config
    assert defaults.eval.screenshots == 8 and defaults.eval.temperature == 0.0  # what vlrl eval's flags said before
