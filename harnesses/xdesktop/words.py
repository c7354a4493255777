"""Short, seeded task text: phrases, file and folder names."""

from __future__ import annotations

import random

WORDS = (
    "apple", "river", "garden", "window", "yellow", "planet", "coffee", "silver", "orange", "market",
    "pencil", "rocket", "forest", "summer", "winter", "bridge", "castle", "island", "mirror", "thunder",
)  # fmt: skip


def phrase(rng: random.Random, words: int = 3) -> str:
    return " ".join(rng.sample(WORDS, words))


def name(rng: random.Random) -> str:
    return "-".join(rng.sample(WORDS, 2))
