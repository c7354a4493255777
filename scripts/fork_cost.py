"""What bringing a harness instance to a mid-episode turn costs, per harness: replay (reset, the
recorded moves again, every screen's content hash checked) against playing those moves the first
time, and fork where the harness forks.

For each harness: one instance plays an oracle episode of up to ``--moves`` moves from each of
``--seeds`` seeds, recording it (``vlrl.harness.fork.EpisodeRecord``); a second instance replays
each record to its last turn, and a forking harness forks the first instance there. Each is timed
``--repeats`` times; the figures are min / median / max seconds, and ``replay_over_play``, the
median ratio of a replay to the first play of the same episode (measured side by side).

    .venv/bin/python scripts/fork_cost.py [--harness desktop browser miniwob] [--moves 4] [--seeds 4] [--repeats 5]

CPU; xdesktop (a real X desktop) only when named. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from vlrl.harness import make
from vlrl.harness.fork import EpisodeRecord, forks, replay, state_of

SETTINGS = {"desktop": {"tasks": ("fill-form", "select-menu")}, "browser": {}, "miniwob": {}, "xdesktop": {}}


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _play(harness, seed: int, moves: int) -> tuple[EpisodeRecord, float]:
    """An oracle episode from ``seed`` and the seconds it took (reset and steps, hashing included)."""
    start = time.perf_counter()
    obs, _ = harness.reset(seed=seed)
    actions, states = [], [state_of(obs)]
    for _ in range(moves):
        action = harness.oracle()
        if action is None:
            break
        obs, _, terminated, truncated, _ = harness.step(action)
        actions.append(action)
        states.append(state_of(obs))
        if terminated or truncated:
            break
    return EpisodeRecord(seed, None, tuple(actions), tuple(states)), time.perf_counter() - start


def measure(harness_id: str, moves: int, seeds: int, repeats: int) -> dict:
    first, second = make(harness_id, **SETTINGS[harness_id]), make(harness_id, **SETTINGS[harness_id])
    try:
        plays, replays, ratios, forked, turns = [], [], [], [], []
        for _ in range(repeats):
            for seed in range(seeds):
                record, played = _play(first, seed, moves)
                start = time.perf_counter()
                replay(second, record, len(record.states) - 1)
                replayed = time.perf_counter() - start
                plays.append(played)
                replays.append(replayed)
                ratios.append(replayed / played)
                turns.append(len(record.moves))
                if forks(first):
                    start = time.perf_counter()
                    twin = first.fork()
                    forked.append(time.perf_counter() - start)
                    twin.close()
        out = {
            "moves_per_episode": statistics.mean(turns),
            "play_s": _spread(plays),
            "replay_s": _spread(replays),
            "replay_over_play": statistics.median(ratios),
        }
        if forked:
            out["fork_s"] = _spread(forked)
        return out
    finally:
        first.close()
        second.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", nargs="+", default=["desktop", "browser", "miniwob"], choices=sorted(SETTINGS))
    parser.add_argument("--moves", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps({h: measure(h, args.moves, args.seeds, args.repeats) for h in args.harness}, indent=1))


if __name__ == "__main__":
    main()
