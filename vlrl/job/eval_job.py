"""``vlrl eval``: one policy's held-out success on harness tasks, with a JSON and a Markdown report.

The policy is a checkpoint folder served by embedded engine replicas (as in training), or any
server speaking ``vlrl serve``'s token-in dialect (``endpoint``); either way the episodes are
ordinary Agent Loops on the Harness Pool, the prompts built by the checkpoint's processor
(``model_path``), so the same policy scores the same on the same seeds both ways. Evaluation
uses the seeds ``eval.seed ..`` that no training group or demonstration of ``vlrl train`` uses,
greedy by default, and measures the baselines (random clicks, the best constant point, the oracle:
``job.baselines``) on the same seeds.

The run folder ``out_dir`` gets ``eval.json`` (every figure and every episode), ``report.md``
and ``episodes/*.png`` (annotated episodes: where the policy clicked); the last line of stdout
is the JSON summary.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from vlrl.config import ConfigError, NonEmpty
from vlrl.job.eval_report import build_report, markdown, summary_of
from vlrl.job.baselines import measure
from vlrl.job.evaluate import Annotator, Evaluation, evaluate
from vlrl.job.progress import Progress
from vlrl.job.rollout_runtime import RolloutRuntime
from vlrl.rollout.http_endpoint import OpenAIEndpoint
from vlrl.rollout.rollout_side import TINY, RolloutSide

REPORT_JSON = "eval.json"
REPORT_MD = "report.md"


EVAL_SCREENSHOTS = 8
"""Annotated episodes per source a ``vlrl eval`` report shows."""


class EvalJob:
    @dataclass(kw_only=True, slots=True)
    class Config(RolloutSide):
        """Held-out evaluation of one policy on the data sources' tasks (``vlrl eval``)."""

        endpoint: OpenAIEndpoint.Config | None = None
        """Evaluate the model behind this server (``vlrl serve``'s token-in dialect) instead of
        serving ``model_path`` on embedded engines; ``model_path`` then names the checkpoint
        whose processor (tokenizer, chat template, image rule) builds the prompts."""

        eval: Evaluation = field(default_factory=lambda: Evaluation(screenshots=EVAL_SCREENSHOTS))
        """Episodes per source, seeds, temperature, annotated episodes (``EVAL_SCREENSHOTS`` per
        source, where training's evaluations keep fewer) and baselines (``every`` is training's
        and unused here)."""

        out_dir: Annotated[str, NonEmpty()] = "runs/eval"
        """Folder of the report: eval.json, report.md and episodes/."""

        adapter: str = ""
        """A PEFT adapter folder (a LoRA checkpoint's ``adapter/``) to evaluate on ``model_path``:
        merged into it by PEFT when the job starts, the merged checkpoint written to
        ``out_dir/policy`` ('' : ``model_path`` as it is)."""

        label: str = ""
        """What the report calls the policy ('' : the adapter or checkpoint, or the endpoint's URL)."""

        progress: Progress.Config = field(default_factory=Progress.Config)
        """The status line on stderr (episodes done, rate, ETA)."""

        def check(self) -> None:
            RolloutSide.check(self)
            if self.endpoint is not None and self.model_path == TINY:
                raise ConfigError(
                    "model_path", self.model_path, "the checkpoint folder whose processor builds the endpoint's prompts"
                )
            if self.adapter:
                from vlrl.train.checkpoint_io import is_adapter_folder

                if not is_adapter_folder(self.adapter):
                    raise ConfigError("adapter", self.adapter, "a PEFT adapter folder (holding adapter_config.json)")
                if self.endpoint is not None or is_adapter_folder(self.model_path) or self.model_path == TINY:
                    raise ConfigError(
                        "adapter", self.adapter, "a base checkpoint folder as model_path and no endpoint beside it"
                    )

        def build(self) -> EvalJob:
            return EvalJob(self)

    def __init__(self, config: EvalJob.Config) -> None:
        self.config = config

    def run(self) -> dict[str, Any]:
        """Evaluate, write the report, print the JSON summary as the last line and return it."""
        config = self.config
        config.preflight()
        started = time.perf_counter()
        out = Path(config.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        runtime = RolloutRuntime(config, model_path=self.merged_adapter(), endpoint=config.endpoint)
        with runtime:
            result, baselines = asyncio.run(self._play(runtime.pool, runtime.store, runtime.annotator, out / "episodes"))
            keys_left = runtime.keys_left()
        about = {
            "policy": config.label or (config.endpoint.base_url if config.endpoint else config.adapter or config.model_path),
            "endpoint": config.endpoint.base_url if config.endpoint else None,
            "processor": config.model_path,
            "seed": config.eval.seed,
            "episodes_per_source": config.eval.episodes,
            "temperature": config.eval.temperature,
            "store_keys_left": keys_left,
        }
        report = build_report(result, baselines=baselines, about=about)
        report["wall_s"] = round(time.perf_counter() - started, 1)
        (out / REPORT_JSON).write_text(json.dumps(report, indent=2))
        (out / REPORT_MD).write_text(markdown(report))
        summary = {**summary_of(report), "report": str(out / REPORT_MD)}
        print(json.dumps(summary), flush=True)
        return summary

    def merged_adapter(self) -> str | None:
        """With ``adapter``, the checkpoint the engines serve: the adapters merged into
        ``model_path`` (in ``out_dir/policy``); None without (``model_path`` is served, or the tiny
        build: ``RolloutRuntime``)."""
        config = self.config
        if not config.adapter:
            return None
        from vlrl.train.checkpoint_io import merge_adapter

        merged = merge_adapter(config.adapter, Path(config.out_dir) / "policy", base=config.model_path)
        print(f"note: evaluating the adapters of {config.adapter} merged into their base at {merged}", file=sys.stderr)
        return str(merged)

    async def _play(self, pool: Any, store: Any, annotator: Annotator, pictures: Path) -> tuple[Any, Any]:
        config = self.config
        progress = Progress(config.progress)
        progress.probe = lambda: {"in_flight": pool.book.in_flight}
        async with progress:
            with progress.phase("eval", total=len(config.sources) * config.eval.episodes, unit="episode"):
                result = await evaluate(
                    pool, store, config.sources, config.eval, tag="eval",
                    annotator=annotator, screenshot_dir=pictures, replies=True, progress=progress,
                )  # fmt: skip
                progress.set(eval=result.success)
            if not config.eval.chance:
                return result, None
            with progress.phase("baselines"):
                evaluation = config.eval
                return result, await measure(
                    pool, config.sources, seed=evaluation.seed, episodes=evaluation.episodes, grid=evaluation.constant_grid
                )


def resolve_target(path: Path) -> tuple[Path, Path | None]:
    """``(checkpoint folder, run folder or None)`` of what ``vlrl eval TARGET`` or ``vlrl serve
    --model`` names: a run folder (its newest complete checkpoint, else the base model it started
    from), a checkpoint folder holding ``hf/``, a Hugging Face folder itself, or a PEFT adapter
    folder (returned as it is: ``adapted_policy`` merges it onto its base)."""
    from vlrl.job.run_folder import SOURCES_FILE, newest_checkpoint
    from vlrl.train.checkpoint_io import is_adapter_folder

    if is_adapter_folder(path):
        return path, None

    if (path / SOURCES_FILE).exists():
        newest = newest_checkpoint(path)
        checkpoint = newest / "hf" if newest is not None else path / "model"
        if not (checkpoint / "config.json").exists():
            raise FileNotFoundError(f"{path}: a run folder without a checkpoint or a base model to evaluate")
        return checkpoint, path
    for candidate in (path, path / "hf"):
        if (candidate / "config.json").exists():
            return candidate, None
    raise FileNotFoundError(
        f"{path}: not a run folder (no sources.json), a checkpoint folder (no config.json) nor a PEFT adapter folder"
        " (no adapter_config.json)"
    )


def adapted_policy(model: Path, adapter: Path | None, out: Path) -> Path:
    """The checkpoint folder to serve or evaluate: ``model`` itself, or, when ``model`` is a PEFT
    adapter folder (on the base it records) or ``adapter`` is given (on ``model``), the adapters
    merged into their base as a plain checkpoint at ``out`` (``checkpoint_io.merge_adapter``), said on stderr."""
    from vlrl.train.checkpoint_io import is_adapter_folder, merge_adapter

    if adapter is not None and not is_adapter_folder(adapter):
        raise FileNotFoundError(f"--adapter {adapter}: not a PEFT adapter folder (no adapter_config.json)")
    if adapter is not None and is_adapter_folder(model):
        raise FileNotFoundError(f"{model}: a PEFT adapter folder; --adapter goes beside the base model, not another adapter")
    base = None if is_adapter_folder(model) else model
    adapter = model if base is None else adapter
    if adapter is None:
        return model
    merged = merge_adapter(adapter, out, base=base)
    print(f"note: serving the adapters of {adapter} merged into their base at {merged}", file=sys.stderr, flush=True)
    return merged


def processor_folder(path: Path) -> Path:
    """The checkpoint folder whose processor builds prompts for the policy ``path`` names (a run,
    checkpoint or Hugging Face folder, or an adapter folder, whose base's)."""
    from vlrl.train.checkpoint_io import adapter_base, is_adapter_folder

    folder, _ = resolve_target(path)
    return adapter_base(folder) if is_adapter_folder(folder) else folder


def listed_model(endpoint: OpenAIEndpoint.Config) -> str | None:
    """The first model id the server lists, when it is a local folder (``vlrl serve --model PATH``
    lists its path): the processor the prompts are built with."""
    import urllib.request

    root = endpoint.base_url.rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    with urllib.request.urlopen(urllib.request.Request(root + "/v1/models", headers=headers), timeout=30) as answer:
        models = json.loads(answer.read())["data"]
    name = models[0]["id"] if models else None
    try:  # vlrl serve lists its --model as given: a checkpoint, run or adapter folder
        return str(processor_folder(Path(name))) if name else None
    except (FileNotFoundError, OSError, ValueError):
        return None
