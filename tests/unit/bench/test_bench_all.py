"""``vlrl bench all``: every benchmark runs, failures are reported without hiding the others,
and the summary table lists each one's ratios against its baseline."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import re

import pytest

from vlrl.bench import runner
from vlrl.bench.registry import BENCHMARKS, Benchmark
from vlrl.bench.summary import HEADLINES


class _Broken(Benchmark):
    def load(self):
        return importlib.import_module(self.module).broken


@pytest.fixture
def fake_benchmarks(monkeypatch):
    """``vlrl bench`` sees two benchmarks: a working ``pack`` and a ``store`` that fails."""
    monkeypatch.setattr(runner, "BENCHMARKS", {
        "pack": Benchmark("pack", "planner", "tests.helpers.fake_benches"),
        "store": _Broken("store", "store", "tests.helpers.fake_benches"),
    })  # fmt: skip


def test_all_runs_every_benchmark_tabulates_headlines_and_writes_one_report(fake_benchmarks, capsys, tmp_path):
    code = runner.run(argparse.Namespace(name="all", list=False, json=True, size="small", report=str(tmp_path)))
    out = capsys.readouterr().out
    assert code == 1  # one benchmark failed
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["failed"] == {"store": "RuntimeError: no room on this machine"}
    lockstep = {"min": 1.1, "median": 1.3, "max": 1.6, "runs": 3}
    assert summary["summary"] == {
        "pack.imbalance_planner": 1.01, "pack.imbalance_kk": 1.2, "pack.lockstep_imbalance": lockstep
    }  # fmt: skip
    assert summary["results"]["pack"]["size_seen"] == "small"
    assert re.search(r"pack\s+imbalance_planner\s+1.01\s+costliest DP rank", out)
    assert re.search(r"pack\s+lockstep_imbalance\s+1.3 \(1.1-1.6\)", out)  # a timing spread as median (min-max)
    # The report: the same JSON, the table in Markdown, and the regime curve plotted.
    assert json.loads((tmp_path / "report.json").read_text()) == summary
    markdown = (tmp_path / "report.md").read_text()
    assert "| pack | `imbalance_kk` | 1.2 | the same for plain Karmarkar-Karp (the planner's seed) |" in markdown
    assert "- `store`: RuntimeError: no room on this machine" in markdown
    assert "![costliest DP rank / mean at DP 8](plots/pack_regimes_dp8.png)" in markdown
    png = (tmp_path / "plots" / "pack_regimes_dp8.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 5000


class _Rerun(Benchmark):
    def load(self):
        return importlib.import_module(self.module).rerun


def test_one_benchmark_rerun_replaces_its_figures_in_the_report(fake_benchmarks, monkeypatch, tmp_path):
    runner.run(argparse.Namespace(name="all", list=False, json=False, size="small", report=str(tmp_path)))
    monkeypatch.setattr(runner, "BENCHMARKS", {"pack": _Rerun("pack", "planner", "tests.helpers.fake_benches")})
    assert runner.run(argparse.Namespace(name="pack", list=False, json=False, size="small", report=str(tmp_path))) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["results"]["pack"]["imbalance_planner"] == report["summary"]["pack.imbalance_planner"] == 1.001
    assert report["failed"] == {"store": "RuntimeError: no room on this machine"} and report["rerun"] == ["pack"]
    markdown = (tmp_path / "report.md").read_text()
    assert "| pack | `imbalance_planner` | 1.001 |" in markdown and "`vlrl bench pack --size small --report DIR`" in markdown
    with pytest.raises(SystemExit, match="holds a --size small report; this run is --size smoke"):
        runner.run(argparse.Namespace(name="pack", list=False, json=False, size="smoke", report=str(tmp_path)))
    with pytest.raises(SystemExit, match="no report.json there"):
        runner.run(argparse.Namespace(name="pack", list=False, json=False, size="small", report=str(tmp_path / "x")))


def _sources(module: str) -> str:
    """The source of a benchmark's module and of the vlrl.bench modules it imports."""
    tree = ast.parse(importlib.util.find_spec(module).loader.get_source(module))
    names = [module] + [
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vlrl.bench.")
    ]
    return "\n".join(importlib.util.find_spec(n).loader.get_source(n) for n in dict.fromkeys(names))


def test_every_headline_names_a_figure_its_benchmark_reports():
    assert set(HEADLINES) == set(BENCHMARKS)
    for name, headlines in HEADLINES.items():
        source = _sources(BENCHMARKS[name].module)
        for pattern, _ in headlines:
            literal = max(pattern.split("*"), key=len)
            assert literal in source, f"{name}: no figure like {pattern!r} in {BENCHMARKS[name].module}"
