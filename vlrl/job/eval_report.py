"""The report of ``vlrl eval``: success per source and per task family with standard errors,
beside the baselines on the same seeds (random clicks, the best constant point, the oracle:
``baselines``), as JSON (``eval.json``, every episode listed) and Markdown (``report.md``).

The standard error of a success rate p over n episodes is sqrt(p (1 - p) / n): with 64 episodes
a rate of 0.5 is known to +-0.06, so two policies 0.05 apart on 64 seeds are not told apart; the
report says n everywhere for that reason. Failed episodes (no trajectory came back) are left out
of the rates and counted by cause.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from vlrl.job.baselines import KINDS, overall
from vlrl.job.evaluate import EpisodeRecord, EvalResult


def rate(wins: list[bool]) -> dict[str, float]:
    """Success rate, its standard error and the episode count of ``wins``."""
    n = len(wins)
    p = sum(wins) / n if n else 0.0
    return {"success": p, "stderr": math.sqrt(p * (1 - p) / n) if n else 0.0, "episodes": n}


def build_report(result: EvalResult, *, baselines: dict[str, dict[str, Any]] | None, about: dict[str, Any]) -> dict[str, Any]:
    """The JSON report: ``about`` (what was evaluated, how), overall and per-source figures beside
    each source's ``baselines`` (None: not measured), and ``episodes``, one entry per episode."""
    played = [e for e in result.episodes if e.finish != "failed"]
    by_source: dict[str, list[EpisodeRecord]] = defaultdict(list)
    for episode in result.episodes:
        by_source[episode.source].append(episode)
    sources = {}
    for name, episodes in by_source.items():
        ok = [e for e in episodes if e.finish != "failed"]
        tasks: dict[str, list[bool]] = defaultdict(list)
        for e in ok:
            tasks[e.task or "(unnamed)"].append(e.success)
        measured = (baselines or {}).get(name)
        bars = {kind: None if measured is None else measured[kind] for kind in KINDS}
        task_bars = {} if measured is None else measured["tasks"]
        sources[name] = {
            **rate([e.success for e in ok]),
            "failed": len(episodes) - len(ok),
            "failures": dict(Counter(e.error for e in episodes if e.finish == "failed")),
            "reward": _mean([e.reward for e in ok]),
            "turns": _mean([e.turns for e in ok]),
            "response_tokens": _mean([e.response_tokens for e in ok]),
            **bars,
            "baselines": measured,
            "tasks": {task: {**rate(wins), **task_bars.get(task, {})} for task, wins in sorted(tasks.items())},
        }
    total = rate([e.success for e in played])
    return {
        **about,
        "success": total["success"],
        "success_stderr": total["stderr"],
        "episodes_played": total["episodes"],
        "episodes_failed": len(result.episodes) - len(played),
        "baselines": overall(baselines) if baselines else None,
        "sources": sources,
        "screenshots": [str(p) for p in result.screenshots],
        "episodes": [_episode(e) for e in result.episodes],
    }


def summary_of(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its per-episode list: the JSON line ``vlrl eval`` prints."""
    return {k: v for k, v in report.items() if k != "episodes"}


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown page: the headline, a table per source and task, failures and
    the annotated episodes."""
    lines = [
        f"# Evaluation of {report['policy']}",
        "",
        f"Held-out seeds {report['seed']} .. {report['seed'] + report['episodes_per_source'] - 1} per source,"
        f" temperature {report['temperature']:g}; {report['episodes_played']} episodes played,"
        f" {report['episodes_failed']} failed. Success **{report['success']:.3f} +- {report['success_stderr']:.3f}**"
        " (standard error).",
        *_baseline_line(report["baselines"]),
        "",
        "| source | task | episodes | success | +- | chance | constant | oracle | reward | turns |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, s in report["sources"].items():
        lines.append(
            f"| {name} | all | {s['episodes']} | {s['success']:.3f} | {s['stderr']:.3f} | {_bars(s)}"
            f" | {s['reward']:+.3f} | {s['turns']:.2f} |"
        )
        for task, t in s["tasks"].items():
            lines.append(f"| {name} | {task} | {t['episodes']} | {t['success']:.3f} | {t['stderr']:.3f} | {_bars(t)} | | |")
    failures = [(name, cause, n) for name, s in report["sources"].items() for cause, n in s["failures"].items()]
    if failures:
        lines += ["", "## Failed episodes", ""]
        lines += [f"- {name}: {n} x `{cause}`" for name, cause, n in failures]
    if report["screenshots"]:
        lines += ["", "## Annotated episodes", ""]
        lines += [f"![{Path(p).stem}](episodes/{Path(p).name})" for p in report["screenshots"]]
    return "\n".join(lines) + "\n"


def _baseline_line(baselines: dict[str, float] | None) -> list[str]:
    if not baselines:
        return []
    oracle = "not measured" if baselines["oracle"] is None else f"{baselines['oracle']:.3f}"
    return [
        "",
        f"Baselines on the same seeds: random clicks {baselines['chance']:.3f}, the best constant point"
        f" (clicked every turn) {baselines['constant']:.3f}, the oracle {oracle}.",
    ]


def _bars(figures: dict[str, Any]) -> str:
    """The chance, constant and oracle cells of a table row ('' where not measured)."""
    return " | ".join("" if figures.get(kind) is None else f"{figures[kind]:.3f}" for kind in KINDS)


def _episode(e: EpisodeRecord) -> dict[str, Any]:
    return {
        "source": e.source, "seed": e.seed, "task": e.task, "success": e.success, "reward": e.reward,
        "turns": e.turns, "response_tokens": e.response_tokens, "finish": e.finish, "error": e.error,
        "replies": list(e.replies), "actions": list(e.actions),
    }  # fmt: skip


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
