"""vlrl harnesses as Gymnasium environments: importing this package registers
``vlrl/{harness}-v0`` and ``vlrl/{harness}-{task}-v0`` for every registered harness, so
``gymnasium.make("vlrl/desktop-click-target-v0")`` works (``registration`` says why an import,
not an entry point). The other direction, any Gymnasium env as a vlrl harness, is the
``gymnasium`` harness codebase (``harnesses/gymnasium``)."""

from vlrl.gym.env import HarnessEnv
from vlrl.gym.registration import register_envs
from vlrl.gym.spaces import CHARSET, KEYS, SCROLL_DIRECTIONS, action_space, decode, encode, observation_space, screen_of

__all__ = [
    "CHARSET",
    "KEYS",
    "SCROLL_DIRECTIONS",
    "HarnessEnv",
    "action_space",
    "decode",
    "encode",
    "observation_space",
    "register_envs",
    "screen_of",
]

register_envs()
