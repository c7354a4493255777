"""Benchmark stand-ins for testing ``vlrl bench all`` itself (the real ones have their own tests)."""


def run(size: str) -> dict:
    regimes = [{"dp": 8, "sequences_per_rank": k, "imbalance_planner": 1 + 1 / k, "imbalance_kk": 1 + 2 / k} for k in (2, 4)]
    return {
        "imbalance_planner": 1.01,
        "imbalance_kk": 1.2,
        "lockstep_imbalance": {"min": 1.1, "median": 1.3, "max": 1.6, "runs": 3},
        "nested": {"cp_fetch_ratio_cp2": 0.5},
        "regimes": regimes,
        "size_seen": size,
    }


def broken(size: str) -> dict:
    raise RuntimeError("no room on this machine")


def rerun(size: str) -> dict:
    return {**run(size), "imbalance_planner": 1.001}
