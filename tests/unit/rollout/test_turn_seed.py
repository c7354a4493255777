"""Every turn of an episode is sampled from its own seed, reproducible from the trajectory id (so
from the run's task seeds): one seed per episode made each turn redraw the first turn's random
numbers, and a near-uniform policy repeated its first reply at almost every position."""

from __future__ import annotations

import torch

from vlrl.rollout.agent_loop import turn_seed
from vlrl.rollout.engine.sampling import SEED_LIMIT, generator_for, sample
from vlrl.rollout.protocol import SamplingParams

TRAJECTORY = "click/3/0/click/3/0.1"


def test_a_turn_seed_is_reproducible_distinct_per_turn_and_in_range():
    seeds = [turn_seed(TRAJECTORY, turn) for turn in range(8)]
    assert seeds == [turn_seed(TRAJECTORY, turn) for turn in range(8)]
    assert len(set(seeds)) == 8 and turn_seed("click/3/1/click/3/1.1", 0) not in seeds
    assert all(0 <= seed < SEED_LIMIT for seed in seeds)


def _reply(seed: int, logits: torch.Tensor) -> torch.Tensor:
    """Tokens drawn as the engine draws them, one request with ``seed`` over ``logits`` (T, V)."""
    params = SamplingParams(seed=seed)
    generator = generator_for(params, logits.device)
    return torch.stack([sample(row[None], [params], [generator])[0][0] for row in logits])


def test_two_turns_of_one_episode_draw_different_random_numbers():
    torch.manual_seed(0)
    turns = 0.05 * torch.randn(2, 64, 500)  # a near-uniform (untrained) policy, other logits each turn
    first, second = (_reply(turn_seed(TRAJECTORY, turn), turns[turn]) for turn in range(2))
    assert (first == second).float().mean() < 0.1  # one seed for both turns repeats nearly all of them
