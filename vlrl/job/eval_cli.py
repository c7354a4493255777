"""``vlrl eval``'s arguments as an ``EvalJob.Config``: which policy, which tasks, where the report goes.

The tasks come from the first of: ``--harness`` (that codebase with its default settings,
``--tasks`` narrowing the families), the run folder's ``sources.json`` (the sources as trained,
``--set`` overrides included), ``--recipe``'s sources. A recipe also gives the pool, engine and
client settings and registers its harness ids; beside a run folder its sources replace the
recorded ones only with ``--recipe-sources``, and a note says where they differ. A run folder's
``evaluation.json`` gives the episodes and the first seed (those of the run's own evaluations),
else ``Evaluation``'s defaults. The pool gets one env pool per codebase unless the recipe sized it.
The flags that set a config field (``EVAL_FLAGS``: ``--episodes``, ``--out``, ...) apply next, and
``--set`` overrides last, as in ``vlrl train``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from vlrl.config import ConfigError, DataSource, EnvSettings, apply_overrides, load_recipe
from vlrl.config.flags import Flag, flag_overrides
from vlrl.job.eval_job import EvalJob, listed_model, processor_folder, resolve_target
from vlrl.job.run_folder import read_evaluation, read_sources
from vlrl.pool import HostBudget
from vlrl.pool.budget import LOOP_POOL
from vlrl.rollout.http_endpoint import OpenAIEndpoint

EVAL_FLAGS = (
    Flag("--episodes", "eval.episodes"),
    Flag("--seed", "eval.seed"),
    Flag("--temperature", "eval.temperature"),
    Flag("--screenshots", "eval.screenshots"),
    Flag("--no-chance", "eval.chance", sets="false", doc="skip the baselines (random clicks, the best constant point, the oracle) on the same seeds"),
    Flag("--out", "out_dir", metavar="DIR"),
)
"""``vlrl eval``'s flags that set a field of ``EvalJob.Config``: after a run folder's own
evaluation settings, before ``--set``."""

UNREGISTERED_HINT = (
    "a harness registered by a recipe (vlrl.harness.register) is known here only with --recipe RECIPE,"
    " and its module only on PYTHONPATH (PYTHONPATH=. for one in the working directory)"
)


def eval_config(args: argparse.Namespace) -> EvalJob.Config:
    """The validated config of one ``vlrl eval`` call (``ConfigError`` names a bad argument)."""
    checkpoint = run_dir = None
    if args.target:
        checkpoint, run_dir = resolve_target(Path(args.target))
    elif not args.endpoint:
        raise ConfigError("TARGET", None, "a run folder, a checkpoint folder, or --endpoint URL")
    if args.recipe_sources and not args.recipe:
        raise ConfigError("--recipe-sources", True, "--recipe RECIPE beside it (the recipe whose sources to evaluate on)")
    config = EvalJob.Config()
    recorded = read_sources(run_dir) if run_dir is not None else None
    if args.recipe:
        trained = load_recipe(args.recipe)
        for name in ("ray", "engine", "client", "store", "pool", "sources", "tiny", "replicas"):
            if hasattr(trained, name):
                setattr(config, name, getattr(trained, name))
        if recorded is not None and not args.recipe_sources and not args.harness:
            _note_differences(recorded, config.sources, args.recipe)
            config.sources = recorded
    if args.harness:
        tasks = [t for t in (args.tasks or "").split(",") if t] or None
        config.sources = [DataSource(name=args.harness, codebase=args.harness, env=EnvSettings(tasks=tasks))]
    elif args.tasks:
        raise ConfigError("--tasks", args.tasks, "--harness ID beside it (the codebase the tasks belong to)")
    elif not args.recipe:
        if recorded is None:
            raise ConfigError("--harness", None, "the tasks to evaluate on: --harness ID, --recipe RECIPE or a run folder")
        config.sources = recorded
    if not args.recipe:
        codebases = dict.fromkeys(s.codebase for s in config.sources)
        shares = {LOOP_POOL: 1.0, **{c: 1.0 for c in codebases}}
        config.pool = replace(config.pool, budget=HostBudget(total_hosts=max(4, len(shares)), shares=shares))
    adapter = getattr(args, "adapter", None)
    if args.endpoint:
        if adapter:
            raise ConfigError("--adapter", adapter, "no --endpoint beside it: the adapters go on TARGET's model, served here")
        config.endpoint = OpenAIEndpoint.Config(base_url=args.endpoint, api_key=args.api_key, model=args.model_name)
        processor = args.processor or (str(processor_folder(checkpoint)) if checkpoint else None) or listed_model(config.endpoint)
        if processor is None:
            raise ConfigError(
                "--processor", None, "the checkpoint folder whose processor builds the prompts (the server lists no local folder)"
            )
        config.model_path = processor
    else:
        if adapter and checkpoint is None:
            raise ConfigError("--adapter", adapter, "TARGET beside it: the base model the adapters go on")
        from vlrl.train.checkpoint_io import adapter_base, is_adapter_folder

        if is_adapter_folder(checkpoint):  # on the base it records
            config.model_path, config.adapter = str(adapter_base(checkpoint)), str(checkpoint)
        else:
            config.model_path, config.adapter = str(checkpoint), adapter or ""
    ran = read_evaluation(run_dir) if run_dir is not None else None
    if ran is not None:
        config.eval = replace(config.eval, episodes=ran["episodes"], seed=ran["seed"])
    if args.target:
        config.out_dir = str(Path(args.target) / "eval")
    try:
        return apply_overrides(config, [*flag_overrides(args, EVAL_FLAGS), *args.overrides])
    except ConfigError as error:
        if error.path.endswith(".codebase") and "registered harness codebase" in error.expected:
            raise ConfigError(error.path, error.value, error.expected, got=error.got, hint=UNREGISTERED_HINT) from None
        raise


def _note_differences(recorded: list[DataSource], recipe: list[DataSource], recipe_name: str) -> None:
    """Say on stderr where ``recipe``'s sources differ from the run's recorded ones (the run's win)."""
    differing = sorted(set(_flat(recorded)) ^ set(_flat(recipe)))
    fields = sorted(dict.fromkeys(path for path, _ in differing))
    if fields:
        print(
            f"note: evaluating the run's own sources (sources.json, as trained); {recipe_name}'s differ in"
            f" {', '.join(fields)}; --recipe-sources evaluates on the recipe's",
            file=sys.stderr,
        )


def _flat(sources: list[DataSource]) -> list[tuple[str, str]]:
    """``(dotted path, repr of value)`` of every leaf field of ``sources``."""
    out: list[tuple[str, str]] = []

    def walk(path: str, value: Any) -> None:
        if isinstance(value, dict) and value:
            for key, item in value.items():
                walk(f"{path}.{key}", item)
        else:
            out.append((path, repr(tuple(value) if isinstance(value, list) else value)))

    for i, source in enumerate(sources):
        walk(f"sources[{i}]", dataclasses.asdict(source))
    return out
