"""``vlrl bench sandbox``: both real-program harnesses measured with and without the sandbox, in a
process of its own (no Ray)."""

from __future__ import annotations


def test_vlrl_bench_sandbox_measures_both_harnesses_with_and_without_the_sandbox():
    from tests.helpers.run_bench import run_bench_alone

    result = run_bench_alone("sandbox", size="smoke")
    assert set(result["harnesses"]) == {"xdesktop", "browser"}
    for name, figures in result["harnesses"].items():
        # Measured, not assumed: the sandboxed programs ran as nobody, the others as the node's user.
        assert 65534 in figures["bubblewrap"]["program_uids"], name
        assert 65534 not in figures["none"]["program_uids"], name
        for kind in ("bubblewrap", "none"):
            for key in ("start_s", "reset_s", "step_s", "pss_mb"):
                spread = figures[kind][key]
                assert 0 < spread["min"] <= spread["median"] <= spread["max"], (name, kind, key)
            assert figures[kind]["pss_mb"]["min"] > 20, (name, kind)  # a browser's or X server's worth
        assert all(figures[f"{key}_ratio"] > 0 for key in ("start_s", "reset_s", "step_s", "pss_mb"))
