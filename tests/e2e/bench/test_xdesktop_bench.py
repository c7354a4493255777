"""``vlrl bench xdesktop``: every family's figures, measured on working oracle episodes."""

from __future__ import annotations


from harnesses.xdesktop.tasks import FAMILIES


def test_vlrl_bench_xdesktop_reports_every_family():
    from tests.helpers.run_bench import run_bench

    result = run_bench("xdesktop")
    assert set(result["families"]) == set(FAMILIES)
    for name, figures in result["families"].items():
        assert figures["oracle_success"] == 1.0, name
        for key in ("reset_s", "step_s", "rss_mb", "cold_start_s"):
            spread = figures[key]
            assert 0 < spread["min"] <= spread["median"] <= spread["max"], (name, key)
        assert figures["rss_mb"]["min"] > 20  # at least an X server's worth: the sum really read /proc
