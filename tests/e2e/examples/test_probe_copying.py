"""examples/probe_copying.py end to end: a short probe of a tiny build trains and reports its score on
the held-out pairs (minutes on a loaded 2-core machine, hence this lane). Its sequences and held-out
pairs are tests/unit/examples/test_probe_copying.py."""

from __future__ import annotations

from tests.unit.examples.test_probe_copying import probe  # noqa: F401  (the fixture)
from vlrl.models import TinyModel


def test_a_short_probe_trains_and_scores_the_held_out_pairs(probe):  # noqa: F811
    tiny = TinyModel(family="qwen3_vl", rope_theta=100.0, words=("Ada", "Silva"))
    result = probe.probe(tiny, lr=1e-3, steps=2, filler=8, evaluate=3, seed=0)
    assert (result["family"], result["steps"], result["held_out"]) == ("qwen3_vl", 2, 3)
    assert result["copied"] in (0.0, 1 / 3, 2 / 3, 1.0)
