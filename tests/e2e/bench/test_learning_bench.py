"""``vlrl bench learning`` at smoke size: the main job's ``:small`` recipe runs through the
production ``TrainJob`` and its held-out curve comes back per seed (a smoke run is never judged:
two RL steps say nothing of learning)."""

from __future__ import annotations


def test_the_smoke_run_reports_the_curve_of_the_production_job(ray_session):
    from vlrl.bench import learning_bench

    result = learning_bench.run("smoke")
    (run,) = result["runs"].values()
    assert set(run["curve"]) >= {"warm", "final"} and all(0 <= v <= 1 for v in run["curve"].values())
    assert "base" not in run["curve"]
    assert run["last"] == run["curve"]["final"] and run["lowest"] == run["curve"]["final"]
    assert result["learns"] is None and result["holds"] is None
    assert result["recorded"]["warm"] == 0.765
