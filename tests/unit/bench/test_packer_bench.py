"""The packer benchmark's workload: long GUI trajectories. Its measures on the session's Ray and in
child processes are tests/integration/bench/test_packer_bench.py."""

from __future__ import annotations

from vlrl.bench.packer_bench import draw_lengths


def test_lengths_are_long_gui_trajectories():
    lengths = draw_lengths(4096, seed=0)
    assert lengths.min() >= 4096 and lengths.max() <= 32768
    assert (lengths >= 16384).mean() > 0.05
