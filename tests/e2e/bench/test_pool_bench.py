"""`vlrl bench pool --json` end to end, in its own process and Ray: it counts Ray's own processes and
the GCS's descriptors, which the session's Ray (shared with other tests) would blur."""

from __future__ import annotations

from tests.helpers.run_bench import run_bench_alone
from vlrl.bench.curves import curves_of


def test_pool_bench_shows_fixed_actors_flat_gcs_descriptors_and_the_baselines_measured_apart_from_start_up():
    result = run_bench_alone("pool", size="smoke")
    n = result["workload"]["episodes"]
    assert result["actors_pool"] == result["pool_8x"]["actors"] == 4
    assert result["pool"]["processes"] == result["pool_8x"]["processes"] == 4
    assert result["actors_per_rollout"] == result["per_rollout"]["processes"] == n
    assert result["actor_pool"]["processes"] == 4
    # Every scheme played the same episodes to their end: the same steps in all.
    played = {name: result[name]["steps_played"] for name in ("pool", "per_rollout", "actor_pool", "pool_on_loop")}
    assert len(set(played.values())) == 1 and played["pool"] >= n * result["workload"]["steps"][0], played
    assert result["pool_8x"]["steps_played"] > 7 * played["pool"]  # 8 x the episodes, each of its own length
    # The GCS holds a descriptor per worker: flat for the pool at 8x the episodes, growing per rollout.
    assert result["gcs_fds_pool_8x"] <= result["gcs_fds_pool"] + 4
    assert result["gcs_fds_per_rollout"] > result["gcs_fds_pool"]
    # One process per rollout holds far more memory than the pool's four hosts.
    assert result["per_rollout"]["rss_mb"] > 1.5 * result["pool"]["rss_mb"]
    assert result["thread_offload_ratio"] > 1
    # CPU per step is counted in each role's own processes (a wrong pid would count nothing).
    roles_of = {"pool": ("loop_host", "env_host"), "per_rollout": ("actor",), "actor_pool": ("actor",)}
    for scheme, roles in roles_of.items():
        assert all(result[scheme][f"{role}_core_ms_per_step"]["min"] > 0 for role in roles), result[scheme]
    sweep = result["sweep"]
    assert [point["episodes"] for point in sweep] == [8, 16]
    for point in sweep:  # the same desktop episodes in both schemes, every per-rollout actor started
        pool, per_rollout = point["pool"], point["per_rollout"]
        assert pool["steps_played"] == per_rollout["steps_played"] >= point["episodes"], point
        assert point["episodes"] // 2 < pool["instances"] <= point["episodes"]  # played side by side, not in turn
    # The pool's processes stay flat as N doubles; one actor per rollout adds a process per episode.
    assert abs(sweep[1]["pool"]["processes"] - sweep[0]["pool"]["processes"]) <= 2
    assert sweep[1]["per_rollout"]["processes"] >= sweep[0]["per_rollout"]["processes"] + 6
    # Each more episode costs one actor per rollout a process (tens of MB); the pool one harness instance.
    more = {scheme: sweep[1][scheme]["pss_mb"] - sweep[0][scheme]["pss_mb"] for scheme in ("pool", "per_rollout")}
    assert more["per_rollout"] > 8 * 30 > more["pool"], more
    # The report plots the sweep: each scheme's curve has a point per N.
    curves = {curve.name: curve for curve in curves_of("pool", result)}
    assert curves["sweep_gcs_fds"].series["one actor per rollout"] == [(p["episodes"], p["per_rollout"]["gcs_fds"]) for p in sweep]
    assert [x for x, _ in curves["sweep_processes"].series["Harness Pool (4 hosts)"]] == [8, 16]
    assert {"sweep_episodes_per_s", "sweep_pss_mb_per_instance"} <= curves.keys()
