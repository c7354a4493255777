"""``vlrl bench rollout``: the main job's rollouts on the embedded engine and on vLLM, side by side.

The workload is the main job's (``examples/train_click.py``, as ``train_click_vllm.py`` runs
it): click-target episodes on a 160x120 desktop, one turn of at most 40 tokens at the rollouts'
temperature (1.0), played by Agent Loops on the Harness Pool exactly as training plays them
(``job.evaluate``: pool, loop hosts, client, store; only the optimizer is left out). The policy is
the recipe's untrained tiny Qwen2-VL, built once with heads of 32 dimensions (what vLLM's CPU
attention takes); it is served by ``EmbeddedEngine`` (``train_click_vllm.py:embedded_head_dim_32``)
and by ``VLLMEngine`` (``train_click_vllm.py:recipe``: vLLM's V1 engine, float32 on CPU), each
with its own Harness Pool, both alive through the run. Every repetition plays the same seeds on
both, the order of the two engines alternating, after one warm-up round each (engine and pool
start are outside the timers). Reported per engine: episodes/s and generated tokens/s (the
episodes' response tokens as their ``SeqMeta`` counts them) as min / median / max over the
repetitions, and the ratio of the medians, vLLM / embedded.

vLLM must be importable where Ray's workers run, so the run takes the vLLM environment:
``RAY_AUTH_MODE=disabled .venv-vllm/bin/vlrl bench rollout``. Elsewhere the vLLM row says
``skipped: <reason>`` and the embedded engine is measured alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from vlrl.bench.spread import spread

ROOT = Path(__file__).resolve().parents[2]
RECIPES = {
    "embedded": "examples/train_click_vllm.py:embedded_head_dim_32",
    "vllm": "examples/train_click_vllm.py:recipe",
}
"""The main job on each engine, with the same tiny build (heads of 32 dimensions, which vLLM's CPU
attention needs; the main job's own default is 16)."""
SETTINGS = {
    "smoke": {"episodes": 8, "reps": 2},
    "small": {"episodes": 64, "reps": 3},
    "full": {"episodes": 256, "reps": 5},
}
SEED = 2_000_000
"""First task seed of the timed episodes (apart from training's and evaluation's)."""


def vllm_missing() -> str:
    """Why vLLM cannot serve here ('' when it can)."""
    if importlib.util.find_spec("vllm") is None:
        return (
            f"vllm is not importable by {sys.executable};"
            " run .venv-vllm/bin/vlrl bench rollout (bash scripts/setup_vllm.sh builds it)"
        )
    return ""


def run(size: str, *, episodes: int | None = None, reps: int | None = None) -> dict[str, Any]:
    from vlrl.config import load_recipe

    settings = SETTINGS[size]
    episodes, reps = episodes or settings["episodes"], reps or settings["reps"]
    configs = {name: load_recipe(str(ROOT / spec)) for name, spec in RECIPES.items()}
    skipped = {"vllm": why} if (why := vllm_missing()) else {}
    main = configs["embedded"]
    assert all(c.tiny == main.tiny and c.sources == main.sources for c in configs.values()), "not the same job"
    with tempfile.TemporaryDirectory(prefix="vlrl-bench-rollout-") as folder:
        tiny = str(Path(folder) / "tiny")
        measured = _measure({n: c for n, c in configs.items() if n not in skipped}, tiny, episodes, reps)
    out: dict[str, Any] = {
        "workload": "examples/train_click.py: click-target 160x120, 1 turn, <= 40 tokens, temperature 1.0",
        "recipes": {name: spec for name, spec in RECIPES.items()},
        "episodes": episodes,
        "reps": reps,
        **measured,
        **{name: f"skipped: {why}" for name, why in skipped.items()},
    }
    for figure in ("episodes_per_s", "tokens_per_s"):
        if skipped:
            out[f"vllm_over_embedded_{figure}"] = f"skipped: {skipped['vllm']}"
        else:
            vllm, embedded = out["vllm"][figure]["median"], out["embedded"][figure]["median"]
            out[f"vllm_over_embedded_{figure}"] = vllm / embedded
    return out


def _measure(configs: dict[str, Any], tiny: str, episodes: int, reps: int) -> dict[str, Any]:
    """Per engine: its rollout runtime (replica, store, Harness Pool; the one tiny build, made in
    ``tiny`` by the first) started once, a warm-up round, then ``reps`` timed rounds."""
    import ray

    from vlrl.job.rollout_runtime import RolloutRuntime

    with contextlib.ExitStack() as started:
        runtimes = {}
        for name, config in configs.items():
            runtime = runtimes[name] = started.enter_context(RolloutRuntime(config, model_path=tiny))
            ray.get(runtime.engines[0].stats.remote())  # started and answering
            asyncio.run(_round(runtime.pool, runtime.store, config, episodes=2, seed=SEED - 2))  # warm-up
        rounds: dict[str, list[dict[str, float]]] = {name: [] for name in configs}
        names = list(configs)
        for rep in range(reps):
            for name in names if rep % 2 == 0 else names[::-1]:
                runtime = runtimes[name]
                rounds[name].append(asyncio.run(_round(runtime.pool, runtime.store, configs[name], episodes, SEED)))
        keys_left = {name: runtime.keys_left() for name, runtime in runtimes.items()}
    return {name: _figures(rounds[name], keys_left[name]) for name in configs}


async def _round(pool: Any, store: Any, config: Any, episodes: int, seed: int) -> dict[str, float]:
    """``episodes`` rollouts per source on seeds ``seed..``, as training plays them; wall time and tokens."""
    from vlrl.job.evaluate import Evaluation, evaluate

    temperature = config.sources[0].agent.temperature  # the rollouts' own (evaluation's default is greedy)
    plan = Evaluation(episodes=episodes, seed=seed, temperature=temperature, screenshots=0, chance=False)
    started = time.perf_counter()
    result = await evaluate(pool, store, config.sources, plan, tag=f"bench-{seed}")
    wall = time.perf_counter() - started
    played = sum(s.episodes - s.failed for s in result.sources.values())
    tokens = sum(s.response_tokens * (s.episodes - s.failed) for s in result.sources.values())
    failed = sum(s.failed for s in result.sources.values())
    errors = [e.error for e in result.episodes if e.error]
    return {
        "wall_s": wall, "episodes": played, "tokens": tokens, "failed": failed, "success": result.success,
        "first_error": errors[0] if errors else "",
    }  # fmt: skip


def _figures(rounds: list[dict[str, float]], keys_left: int) -> dict[str, Any]:
    return {
        "episodes_per_s": spread([r["episodes"] / r["wall_s"] for r in rounds]),
        "tokens_per_s": spread([r["tokens"] / r["wall_s"] for r in rounds]),
        "wall_s": spread([r["wall_s"] for r in rounds]),
        "tokens_per_episode": statistics.mean(r["tokens"] / max(r["episodes"], 1) for r in rounds),
        "success": statistics.mean(r["success"] for r in rounds),
        "failed_episodes": sum(int(r["failed"]) for r in rounds),
        "store_keys_left": keys_left,
        "first_error": next((r["first_error"] for r in rounds if r["first_error"]), ""),
    }
