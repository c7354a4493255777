"""``vlrl bench tiles`` on real harness trajectories: exact pixels back, a fraction of PNG's bytes
stored, and later turns writing and shipping only the tiles that changed."""

from __future__ import annotations


def test_vlrl_bench_tiles_reports_each_trajectory_kind(ray_session):
    from tests.helpers.run_bench import run_bench

    result = run_bench("tiles")
    runs = {run["harness"]: run for run in result["runs"]}
    assert set(runs) == {"browser", "desktop"} and all("skipped" not in run for run in runs.values()), runs
    for run in runs.values():
        assert run["exact"] and run["turns"] >= 8
        assert run["stored_over_png"] < 0.5 and run["stored_over_raw"] < 0.01
        written = run["written_bytes_per_turn"]
        assert written["tiled"]["median"] * 100 < written["raw"]["median"]  # a turn writes what changed
        shipped = run["shipped_bytes_per_turn"]  # a turn ships what changed, on both hops
        assert shipped["env_to_loop"]["tiles"]["median"] * 100 < shipped["env_to_loop"]["whole"]["median"]
        assert shipped["loop_to_engine"]["tiles"]["median"] * 100 < shipped["loop_to_engine"]["whole_delta"]["median"]
        for figure in ("fetch_s_per_image", "raw_fetch_s_per_image", "png_decode_s_per_image"):
            assert 0 < run[figure]["min"] <= run[figure]["median"] <= run[figure]["max"]
    assert set(result["fetch_over_png_decode"]) == {"browser", "desktop"}
