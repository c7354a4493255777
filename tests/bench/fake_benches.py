"""Benchmark stand-ins for testing ``vlrl bench all`` itself (the real ones have their own tests)."""


def run(size: str) -> dict:
    return {"imbalance_planner": 1.01, "imbalance_kk": 1.2, "nested": {"cp_fetch_ratio_cp2": 0.5}, "size_seen": size}


def broken(size: str) -> dict:
    raise RuntimeError("no room on this machine")
