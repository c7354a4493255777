"""The ``vlrl`` command: ``train``, ``rollout``, ``eval``, ``serve``, ``bench``, ``plot`` and ``check``.

Cheap to import on purpose: torch and ray come in with the components a recipe builds, and the
bench runner only when ``vlrl bench`` runs, so ``vlrl --help`` answers at once. A bad recipe or
``--set`` prints ``error: ...`` naming the field and exits 2, without a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from functools import partial

from vlrl import __version__
from vlrl.config import ConfigError, RecipeError, load_recipe, render
from vlrl.config.flags import Flag, add_flags, flag_overrides

STOPPED = 3
"""Exit code of a ``vlrl train`` that stopped on purpose before its end (a warm start left at or
below the baselines); the job said why on stderr."""
_RECIPE_HELP = "recipe file, optionally with the function to call: path/to/recipe.py[:function] (default: recipe)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``vlrl`` with ``argv`` (default: the process arguments); return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(with_bench=argv[:1] == ["bench"], with_configs=argv[:1] in (["serve"], ["eval"]))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version and usage errors: return the code argparse chose
        return exit_.code if isinstance(exit_.code, int) else 0
    try:
        return args.handler(args)
    except (ConfigError, RecipeError) as error:
        return _fail(str(error))


def build_parser(*, with_bench: bool = False, with_configs: bool = True) -> argparse.ArgumentParser:
    """The argument parser; ``with_bench`` imports the bench runner to add its arguments,
    ``with_configs`` the configs of ``vlrl serve`` and ``vlrl eval`` to add the flags mapped onto
    them (their help shows the configs' defaults; the configs bring torch in)."""
    parser = argparse.ArgumentParser(
        prog="vlrl", description="Large-batch RL for vision-language GUI and computer-use agents."
    )
    parser.add_argument("--version", action="version", version=f"vlrl {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_train(commands)
    _add_rollout(commands)
    _add_eval(commands, with_configs)
    _add_serve(commands, with_configs)
    _add_plot(commands)
    _add_bench(commands, with_bench)
    _add_check(commands)
    return parser


def _add_train(commands: argparse._SubParsersAction) -> None:
    train = _add_command(
        commands,
        "train",
        "train with a recipe",
        "Load a recipe (a Python function returning the run's config), apply --set overrides,\n"
        "validate, then build the job and run it.",
        "examples:\n"
        "  vlrl train examples/train_click.py\n"
        "  vlrl train examples/train_click.py --resume\n"
        "  vlrl train path/to/recipe.py --print-config\n"
        "  vlrl train path/to/recipe.py --print-config --resolved   # the settings as they will run\n"
        "  vlrl train path/to/recipe.py:small --set optim.lr=1e-4 --set store=RayStore",
    )
    _add_recipe_arguments(train)
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in the recipe's run_dir from its last checkpoint (the same as --set resume=true)",
    )
    train.add_argument(
        "--resolved", action="store_true",
        help="with --print-config: print the run plan instead, the settings as they will run (each stage's optimizer"
        " at the rate AdamW gets, a tiny build's rate scale applied; each rank's trainer; the engine; the layout)",
    )  # fmt: skip
    train.set_defaults(handler=_run_recipe)


def _add_rollout(commands: argparse._SubParsersAction) -> None:
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
    rollout.set_defaults(handler=_run_recipe)


SERVE_FLAGS = (
    Flag("--host", "host"),
    Flag("--port", "port"),
    Flag("--served-model-name", "served_model_name", metavar="NAME"),
    Flag("--device", "engine.device"),
    Flag("--dtype", "engine.dtype"),
    Flag("--max-batch", "engine.max_batch"),
    Flag("--image-cache-mb", "engine.image_cache_mb"),
    Flag("--max-request-mb", "max_request_mb"),
    Flag("--max-image-pixels", "max_image_pixels"),
    Flag("--max-images", "max_images"),
    Flag("--max-request-pixels", "max_request_pixels"),
    Flag("--max-queued", "max_queued"),
    Flag("--max-model-len", "max_model_len", metavar="TOKENS"),
    Flag("--allow-remote-images", "remote_image_hosts", repeat=True, metavar="HOST"),
)
"""``vlrl serve``'s flags that set a field of its ``OpenAIServer.Config``."""
API_KEY_VARIABLE = "VLRL_API_KEY"
"""The environment variable ``--api-key`` falls back on (``vlrl serve`` and ``vlrl eval --endpoint``)."""


def _add_eval(commands: argparse._SubParsersAction, with_configs: bool) -> None:
    evaluate = _add_command(
        commands,
        "eval",
        "evaluate a policy on held-out harness tasks",
        "Evaluate a policy on held-out seeds (1,000,000 onwards: no training group uses them), greedy by\n"
        "default, and write a report: success per source and per task family with standard errors,\n"
        "the baselines on the same seeds (random clicks, the best constant point, the oracle), and\n"
        "annotated episodes. The policy is TARGET (a run folder: its newest checkpoint; a checkpoint\n"
        "folder; a Hugging Face folder) on embedded engines,\n"
        "or the model behind --endpoint (vlrl serve). The tasks are --harness's, else the run folder's\n"
        "as trained (its --set overrides included), else --recipe's; a run folder also gives the episodes\n"
        "and seeds of its own evaluations. Ends with a JSON line; OUT/eval.json and OUT/report.md hold the rest.",
        "examples:\n"
        "  vlrl eval runs/train_click\n"
        "  vlrl eval runs/train_click/checkpoints/step-000050 --episodes 200\n"
        "  vlrl eval --endpoint http://127.0.0.1:8000 --harness desktop --tasks click-target\n"
        "  vlrl eval --endpoint http://gpu-node:8000 --processor ckpt/hf --recipe examples/train_click.py\n"
        "  PYTHONPATH=. vlrl eval runs/counter --recipe train_counter.py   # a harness the recipe registers",
    )
    evaluate.add_argument(
        "target", nargs="?", metavar="TARGET",
        help="run folder, checkpoint folder, Hugging Face folder, or PEFT adapter folder (on the base it records)",
    )  # fmt: skip
    evaluate.add_argument(
        "--adapter", metavar="DIR",
        help="PEFT adapter folder (a LoRA checkpoint's adapter/) merged into TARGET's model before evaluating it (into OUT/policy)",
    )  # fmt: skip
    evaluate.add_argument("--endpoint", metavar="URL", help="evaluate the model of this OpenAI-compatible server (vlrl serve)")
    evaluate.add_argument("--api-key", help=f"bearer key of --endpoint (default: ${API_KEY_VARIABLE})")
    evaluate.add_argument("--model-name", metavar="NAME", help="model id to request from --endpoint (default: the first it lists)")
    evaluate.add_argument(
        "--processor", metavar="PATH", help="checkpoint whose processor builds --endpoint's prompts (default: TARGET, else the listed model's folder)"
    )
    evaluate.add_argument(
        "--recipe", metavar="RECIPE",
        help="load this training recipe: the harness ids it registers, its pool, engine and client, and its sources"
        " when TARGET is no run folder",
    )  # fmt: skip
    evaluate.add_argument(
        "--recipe-sources", action="store_true",
        help="evaluate on --recipe's sources, not the run folder's recorded ones (which hold the run's --set overrides)",
    )  # fmt: skip
    evaluate.add_argument("--harness", metavar="ID", help="evaluate on this harness codebase's tasks (default settings)")
    evaluate.add_argument("--tasks", metavar="A,B", help="task families of --harness (default: all of them)")
    if with_configs:
        from vlrl.job.eval_cli import EVAL_FLAGS
        from vlrl.job.eval_job import EvalJob

        add_flags(evaluate, EvalJob.Config(), EVAL_FLAGS)
    evaluate.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a field of the evaluation config (repeatable, after the flags above): sources[0].agent.max_turns=3,"
        " eval.episodes=16; --print-config lists every path",
    )  # fmt: skip
    evaluate.add_argument("--print-config", action="store_true", help="print the validated config and exit")
    evaluate.set_defaults(handler=_eval)


def _add_serve(commands: argparse._SubParsersAction, with_configs: bool) -> None:
    serve = _add_command(
        commands,
        "serve",
        "serve a policy over an OpenAI-compatible API",
        "Serve a checkpoint (Qwen2-VL, Qwen2.5-VL or Qwen3-VL: vlrl.models) with the embedded engine over an OpenAI-compatible HTTP API:\n"
        "GET /v1/models, POST /v1/chat/completions (non-streaming only), GET /health, GET /metrics.\n"
        "Images are data: URLs; a part's \"uuid\" lets later requests send \"image_url\": null instead\n"
        "of the bytes (vLLM's semantics; a uuid the server no longer holds is a 400 naming it).\n"
        "Token-in/token-out for RL: send \"prompt_token_ids\" and \"return_token_ids\": true, \"logprobs\": true.\n"
        "Runs until SIGINT or SIGTERM. Every flag below sets a field of OpenAIServer.Config; --set sets any\n"
        "of them (--print-config lists every path).",
        "examples:\n"
        "  vlrl serve --model ckpt/policy\n"
        "  vlrl serve --model runs/train_click/checkpoints/step-000050/adapter    # a LoRA adapter folder on its recorded base\n"
        "  vlrl serve --model ckpt/base --adapter ckpt/adapter                       # a base plus an adapter folder\n"
        "  VLRL_API_KEY=secret vlrl serve --model ckpt/policy --host 0.0.0.0 --port 9000 --device cuda\n"
        "  vlrl serve --model ckpt/policy --set engine.max_batch=16 --set default_max_tokens=512",
    )
    serve.add_argument(
        "--model", required=True, metavar="PATH",
        help="checkpoint directory to serve: a Hugging Face folder, a run or checkpoint folder (its newest hf/), or a PEFT"
        " adapter folder (merged into the base its adapter_config.json names)",
    )  # fmt: skip
    serve.add_argument(
        "--adapter", metavar="DIR", help="PEFT adapter folder merged into --model (the base) before serving"
    )
    serve.add_argument(
        "--api-key",
        help=f"require this key as the bearer token of every /v1/ request (--set api_key; default: ${API_KEY_VARIABLE}, else none)",
    )
    if with_configs:
        from vlrl.rollout.server import OpenAIServer

        add_flags(serve, OpenAIServer.Config(model_path=""), SERVE_FLAGS)
    serve.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a field of the server config (repeatable, after the flags above): engine.max_batch=16, max_uuids=1024",
    )  # fmt: skip
    serve.add_argument("--print-config", action="store_true", help="print the validated config and exit")
    serve.set_defaults(handler=_serve)


def _add_plot(commands: argparse._SubParsersAction) -> None:
    plot = _add_command(
        commands,
        "plot",
        "plot a training run, or compare several",
        "Write the PNG plots of a run folder (reward, pass rate, episode length, entropy, throughput,\n"
        "an overview, and the annotated evaluation episodes) into RUN_DIR/plots, from its metrics.jsonl.\n"
        "With several run folders, write one comparison instead: each run's held-out success and\n"
        "training pass rate over its RL steps (--out). Works on finished, interrupted or running runs.",
        "examples:\n  vlrl plot runs/train_click\n"
        "  vlrl plot runs/train_desktop_form runs/train_desktop_form_step_credit --out runs/form.png",
    )
    plot.add_argument("run_dir", metavar="RUN_DIR", nargs="+", help="the run folder(s) (a training recipe's run_dir)")
    plot.add_argument("--out", help="with several runs: the comparison's PNG (default: compare.png beside them)")
    plot.set_defaults(handler=_plot)


def _add_bench(commands: argparse._SubParsersAction, with_bench: bool) -> None:
    bench = _add_command(commands, "bench", "run a benchmark", "Run one benchmark and print its figures.")
    if with_bench:
        from vlrl.bench import runner

        runner.add_arguments(bench)
        bench.set_defaults(handler=runner.run)


def _add_check(commands: argparse._SubParsersAction) -> None:
    check = _add_command(
        commands,
        "check",
        "run the plug-in contract suite on a registered harness, encoder or model family",
        "Load a registered plug-in (built in, registered by a module, or installed as an entry point)\n"
        "and run every rule of its kind's contract, printing each rule as it passes. Exits 0 when\n"
        "all pass, 1 at the first broken rule (named), 2 when the id is unknown or cannot load.",
        "examples:\n  vlrl check harness desktop\n  PYTHONPATH=. vlrl check harness counter_harness:CounterHarness\n"
        "  PYTHONPATH=. vlrl check harness counter --recipe train_counter.py\n"
        "  vlrl check encoder qwen2vl\n  vlrl check model qwen3_vl",
    )
    check.add_argument("kind", choices=["harness", "encoder", "model"], help="the plug-in kind")
    check.add_argument(
        "id", metavar="ID",
        help="the registered id (an unknown one is answered with the known ids), or for a harness its module:Class path",
    )  # fmt: skip
    check.add_argument(
        "--recipe", metavar="RECIPE",
        help="harness only: load this recipe first (the ids it registers), and check ID with the settings of its first source on ID",
    )  # fmt: skip
    check.set_defaults(handler=_check)


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
        help="override a config field by its dotted path (repeatable): optim.lr=1e-4 and steps=40 (train), "
        "sources[0].env.tasks=[click-target], sources[0].env.params.distractors=2, store=RayStore to pick that config; "
        "--print-config lists every path",
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print the validated config, each field with its documentation, and exit"
    )


def _run_recipe(args: argparse.Namespace) -> int:
    overrides = list(args.overrides)
    if getattr(args, "resume", False):
        overrides.append("resume=true")
    cfg = load_recipe(args.recipe, overrides)
    resolved = getattr(args, "resolved", False)
    if resolved and not args.print_config:
        return _fail("--resolved: only with --print-config")
    if resolved:
        print(render(cfg.plan(), settable=False), end="")
        return 0
    if args.print_config:
        print(render(cfg), end="")
        return 0
    name = type(cfg).__qualname__
    if not callable(getattr(cfg, "build", None)):
        return _fail(f"{args.recipe}: {name} has no build(); a {args.command} recipe returns a config that builds a job")
    job = cfg.build()
    if not callable(getattr(job, "run", None)):
        return _fail(f"{args.recipe}: {name}.build() returned {type(job).__qualname__}, which has no run()")
    result = job.run()
    return STOPPED if isinstance(result, dict) and result.get("stopped") else 0


def _check(args: argparse.Namespace) -> int:
    from vlrl.registry import ContractError

    if args.recipe and args.kind != "harness":
        return _fail(f"--recipe: only for a harness, not an {args.kind}")
    if args.kind == "harness":
        from vlrl.harness import HarnessError as KindError
        from vlrl.harness.registry import run_contract as run_harness_contract

        settings = _recipe_settings(args.recipe, args.id) if args.recipe else None
        if settings:
            print(f"settings of {args.recipe}'s source: {settings}")
        run_contract = partial(run_harness_contract, settings=settings)
    elif args.kind == "encoder":
        from encoders.protocol import EncoderError as KindError
        from encoders.registry import run_contract
    else:
        from vlrl.models.registry import ModelFamilyError as KindError
        from vlrl.models.contract import run_contract
    try:
        for rule in run_contract(args.id):
            print(f"pass  {rule}")
    except ContractError as error:
        print(f"FAIL  {error.rule}: {error.detail}")
        print(f"error: {args.kind} {args.id!r} breaks rule {error.rule!r}: {error.detail}", file=sys.stderr)
        return 1
    except KindError as error:
        module = ":" in args.id and isinstance(error.__cause__, ModuleNotFoundError)
        return _fail(str(error) + ("; a module of the working directory needs PYTHONPATH=." if module else ""))
    print(f"{args.kind} {args.id!r}: every rule passed")
    return 0


def _recipe_settings(recipe: str, harness_id: str) -> dict | None:
    """The environment settings of ``recipe``'s first source on ``harness_id`` (None when no source
    uses it), after loading the recipe registers its ids."""
    config = load_recipe(recipe)
    for source in getattr(config, "sources", ()):
        if source.codebase == harness_id:
            return source.env.as_kwargs()
    return None


def _eval(args: argparse.Namespace) -> int:
    from vlrl.job.eval_cli import eval_config

    args.api_key = args.api_key or os.environ.get(API_KEY_VARIABLE)
    try:
        config = eval_config(args)
    except FileNotFoundError as error:
        return _fail(str(error))
    if args.print_config:
        print(render(config), end="")
        return 0
    config.build().run()
    return 0


def _plot(args: argparse.Namespace) -> int:
    for run_dir in args.run_dir:
        if not os.path.isdir(run_dir):
            return _fail(f"{run_dir}: not a run folder")
    if args.out and len(args.run_dir) == 1:
        return _fail("--out: only for a comparison of several run folders")
    from vlrl.job.plots import plot_comparison, plot_run

    try:
        if len(args.run_dir) == 1:
            written = plot_run(args.run_dir[0])
        else:
            out = args.out or os.path.join(os.path.commonpath([os.path.abspath(d) for d in args.run_dir]), "compare.png")
            written = [plot_comparison(args.run_dir, out)]
    except FileNotFoundError as error:
        return _fail(str(error))
    for path in written:
        print(path)
    return 0


def _serve(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.model):
        return _fail(f"--model {args.model}: not a checkpoint directory")
    import shutil
    import tempfile
    from pathlib import Path

    from vlrl.config import validate
    from vlrl.job.eval_job import adapted_policy, processor_folder, resolve_target

    merged = Path(tempfile.mkdtemp(prefix="vlrl-serve-"))
    try:
        model, _ = resolve_target(Path(args.model))
        config = _server_config(args, str(processor_folder(model)))  # a bad option is named before any merge
        if args.print_config:
            print(render(config), end="")
            return 0
        policy = adapted_policy(model, Path(args.adapter) if args.adapter else None, merged)
        return _serve_folder(args, str(policy))
    except FileNotFoundError as error:
        return _fail(str(error))
    finally:
        shutil.rmtree(merged, ignore_errors=True)


def _serve_folder(args: argparse.Namespace, policy: str) -> int:
    _server_config(args, policy).build().run()
    return 0


def _server_config(args: argparse.Namespace, policy: str):
    """``vlrl serve``'s validated ``OpenAIServer.Config`` of the checkpoint folder ``policy``: the
    config's defaults, then the flags, then ``--set``."""
    from vlrl.config import apply_overrides
    from vlrl.rollout.server import OpenAIServer

    config = OpenAIServer.Config(model_path=policy, api_key=args.api_key or os.environ.get(API_KEY_VARIABLE))
    if policy != args.model:  # clients name the folder they asked for, not the merged copy
        config.served_model_name = args.model
    return apply_overrides(config, [*flag_overrides(args, SERVE_FLAGS), *args.overrides])


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
