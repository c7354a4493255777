"""``vlrl bench xdesktop``: every family's figures, measured on working oracle episodes. It runs in a
process of its own: it uses no Ray, so that costs only an interpreter's start, and once run in the
test process on a heavily loaded machine its editor oracle solved one episode of two."""

from __future__ import annotations


from harnesses.xdesktop.tasks import FAMILIES


def test_vlrl_bench_xdesktop_reports_every_family():
    from tests.helpers.run_bench import run_bench_alone

    result = run_bench_alone("xdesktop", size="smoke")  # one episode and one cold start a family
    assert set(result["families"]) == set(FAMILIES)
    for name, figures in result["families"].items():
        assert figures["oracle_success"] == 1.0, name
        for key in ("reset_s", "step_s", "rss_mb", "cold_start_s"):
            spread = figures[key]
            assert 0 < spread["min"] <= spread["median"] <= spread["max"], (name, key)
        assert figures["rss_mb"]["min"] > 20  # at least an X server's worth: the sum really read /proc
