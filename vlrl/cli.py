"""The ``vlrl`` command: ``train``, ``rollout``, ``serve`` and ``bench``.

Cheap to import on purpose: torch and ray come in with the components a recipe builds, and the
bench runner only when ``vlrl bench`` runs, so ``vlrl --help`` answers at once. A bad recipe or
``--set`` prints ``error: ...`` naming the field and exits 2, without a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from vlrl import __version__
from vlrl.config import ConfigError, RecipeError, load_recipe, render

_RECIPE_HELP = "recipe file, optionally with the function to call: path/to/recipe.py[:function] (default: recipe)"
_LATER = {"serve": "the OpenAI-compatible server"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``vlrl`` with ``argv`` (default: the process arguments); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(with_bench=argv[:1] == ["bench"])
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version and usage errors: return the code argparse chose
        return exit_.code if isinstance(exit_.code, int) else 0
    try:
        return args.handler(args)
    except (ConfigError, RecipeError) as error:
        return _fail(str(error))


def build_parser(*, with_bench: bool = False) -> argparse.ArgumentParser:
    """The argument parser; ``with_bench`` imports the bench runner to add its arguments."""
    parser = argparse.ArgumentParser(
        prog="vlrl", description="Large-batch RL for vision-language GUI and computer-use agents."
    )
    parser.add_argument("--version", action="version", version=f"vlrl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = _add_command(
        commands,
        "train",
        "train with a recipe",
        "Load a recipe (a Python function returning the run's config), apply --set overrides,\n"
        "validate, then build the job and run it.",
        "examples:\n"
        "  vlrl train path/to/recipe.py --print-config\n"
        "  vlrl train path/to/recipe.py:small --set optim.lr=1e-6 --set store=RayStore",
    )
    _add_recipe_arguments(train)
    train.add_argument(
        "--print-config", action="store_true", help="print the validated config, each field with its documentation, and exit"
    )
    train.set_defaults(handler=_run_recipe)

    rollout = _add_command(
        commands,
        "rollout",
        "collect rollouts with a recipe, without training",
        "Load a rollout recipe, apply --set overrides, validate, then run its episodes on the\n"
        "Harness Pool and print what each data source achieved.",
        "examples:\n"
        "  vlrl rollout examples/scripted_rollout.py\n"
        "  vlrl rollout examples/scripted_rollout.py --set policy=random --set episodes_per_source=32",
    )
    _add_recipe_arguments(rollout)
    rollout.add_argument(
        "--print-config", action="store_true", help="print the validated config, each field with its documentation, and exit"
    )
    rollout.set_defaults(handler=_run_recipe)

    serve = _add_command(
        commands,
        "serve",
        "serve a policy over an OpenAI-compatible API (not available yet)",
        "Serve a checkpoint for chat completions. The server lands in a later version of vlrl.",
    )
    serve.add_argument("--model", required=True, metavar="PATH", help="checkpoint directory to serve")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    serve.add_argument("--api-key", help="require this key as the bearer token of every request")
    serve.set_defaults(handler=_not_available)

    bench = _add_command(
        commands, "bench", "run a benchmark", "Run one benchmark and print its figures."
    )
    if with_bench:
        from vlrl.bench import runner

        runner.add_arguments(bench)
        bench.set_defaults(handler=runner.run)
    return parser


def _add_command(
    commands: argparse._SubParsersAction, name: str, summary: str, description: str, epilog: str = ""
) -> argparse.ArgumentParser:
    return commands.add_parser(
        name,
        help=summary,
        description=description,
        epilog=epilog or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recipe", metavar="RECIPE", help=_RECIPE_HELP)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field by its dotted path (repeatable): optim.lr=1e-6, tags=a,b or [\"a\"], "
        "store=RayStore to pick that config; train --print-config lists every path",
    )


def _run_recipe(args: argparse.Namespace) -> int:
    cfg = load_recipe(args.recipe, args.overrides)
    if args.print_config:
        print(render(cfg), end="")
        return 0
    name = type(cfg).__qualname__
    if not callable(getattr(cfg, "build", None)):
        return _fail(f"{args.recipe}: {name} has no build(); a {args.command} recipe returns a config that builds a job")
    job = cfg.build()
    if not callable(getattr(job, "run", None)):
        return _fail(f"{args.recipe}: {name}.build() returned {type(job).__qualname__}, which has no run()")
    job.run()
    return 0


def _not_available(args: argparse.Namespace) -> int:
    return _fail(f"vlrl {args.command} is not available yet in vlrl {__version__}: {_LATER[args.command]} lands later")


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
