"""``vlrl eval``'s arguments as an ``EvalJob.Config``: which policy, which tasks, where the report goes.

The tasks come from the first of: ``--recipe`` (a training recipe's sources, with its pool,
engine and client settings), ``--harness`` (that codebase with its default settings, ``--tasks``
narrowing the families), the run folder's ``sources.json``. The pool gets one env pool per
codebase unless the recipe sized it. ``--set`` overrides apply last, as in ``vlrl train``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from vlrl.config import ConfigError, DataSource, EnvSettings, apply_overrides, load_recipe
from vlrl.job.eval_job import EvalJob, listed_model, resolve_target
from vlrl.job.run_folder import read_sources
from vlrl.pool import HostBudget
from vlrl.pool.budget import LOOP_POOL
from vlrl.rollout.http_endpoint import OpenAIEndpoint


def eval_config(args: argparse.Namespace) -> EvalJob.Config:
    """The validated config of one ``vlrl eval`` call (``ConfigError`` names a bad argument)."""
    checkpoint = run_dir = None
    if args.target:
        checkpoint, run_dir = resolve_target(Path(args.target))
    elif not args.endpoint:
        raise ConfigError("TARGET", None, "a run folder, a checkpoint folder, or --endpoint URL")
    config = EvalJob.Config()
    if args.recipe:
        trained = load_recipe(args.recipe)
        for name in ("ray", "engine", "client", "store", "pool", "sources", "tiny", "replicas"):
            if hasattr(trained, name):
                setattr(config, name, getattr(trained, name))
    if args.harness:
        tasks = [t for t in (args.tasks or "").split(",") if t] or None
        config.sources = [DataSource(name=args.harness, codebase=args.harness, env=EnvSettings(tasks=tasks))]
    elif args.tasks:
        raise ConfigError("--tasks", args.tasks, "--harness ID beside it (the codebase the tasks belong to)")
    elif not args.recipe:
        if run_dir is None:
            raise ConfigError("--harness", None, "the tasks to evaluate on: --harness ID, --recipe RECIPE or a run folder")
        config.sources = read_sources(run_dir)
    if not args.recipe:
        codebases = dict.fromkeys(s.codebase for s in config.sources)
        shares = {LOOP_POOL: 1.0, **{c: 1.0 for c in codebases}}
        config.pool = replace(config.pool, budget=HostBudget(total_hosts=max(4, len(shares)), shares=shares))
    if args.endpoint:
        config.endpoint = OpenAIEndpoint.Config(base_url=args.endpoint, api_key=args.api_key, model=args.model_name)
        processor = args.processor or (str(checkpoint) if checkpoint else None) or listed_model(config.endpoint)
        if processor is None:
            raise ConfigError(
                "--processor", None, "the checkpoint folder whose processor builds the prompts (the server lists no local folder)"
            )
        config.model_path = processor
    else:
        config.model_path = str(checkpoint)
    evaluation = replace(config.eval, episodes=args.episodes, temperature=args.temperature, screenshots=args.screenshots)
    config.eval = replace(evaluation, chance=not args.no_chance, seed=evaluation.seed if args.seed is None else args.seed)
    config.out_dir = args.out or (str(Path(args.target) / "eval") if args.target else "runs/eval")
    return apply_overrides(config, args.overrides)

