"""Where a wrapped env's screen and goal come from.

The screen is the observation itself when it is an ``(H, W, 3)`` uint8 ``Box``, else the entry
``image_key`` of a ``Dict`` observation (default: its only such entry), else the env's
``render()`` frames (``render_mode="rgb_array"``) when the observations hold no image at all. The
goal is the only ``Text`` entry of a ``Dict`` observation (the vlrl bridge's ``goal``), if
there is one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


@dataclass(frozen=True, slots=True)
class Frames:
    image_key: str | None
    """The ``Dict`` entry holding the screen; None: the observation itself, or rendered frames."""
    goal_key: str | None
    """The ``Dict`` entry holding the goal text, if any."""
    rendered: bool
    """Frames come from ``env.render()``, not from the observations."""

    @classmethod
    def of(cls, space: spaces.Space[Any], image_key: str | None) -> Frames:
        """The frames of observations in ``space`` (rendered when they hold no image); a named
        ``image_key`` that is not an image entry is a ``ValueError``."""
        entries = space.spaces if isinstance(space, spaces.Dict) else {}
        images = [key for key, sub in entries.items() if _is_image(sub)]
        texts = [key for key, sub in entries.items() if isinstance(sub, spaces.Text)]
        goal_key = texts[0] if len(texts) == 1 else None
        if image_key is not None and image_key not in images:
            raise ValueError(
                f"gymnasium harness setting image_key={image_key!r}; expected one of the observation's "
                f"(H, W, 3) uint8 entries {images}"
            )
        if image_key is None and len(images) > 1:
            raise ValueError(f"gymnasium harness: the observation has several images {images}; set image_key to one")
        if _is_image(space):
            return cls(None, None, rendered=False)
        key = image_key or (images[0] if images else None)
        return cls(key, goal_key, rendered=key is None)

    def frame(self, obs: Any, env: gym.Env[Any, Any]) -> np.ndarray:
        if self.rendered:
            return np.asarray(env.render())
        return np.asarray(obs if self.image_key is None else obs[self.image_key])

    def goal(self, obs: Any) -> str | None:
        return None if self.goal_key is None else str(obs[self.goal_key])


def _is_image(space: spaces.Space[Any]) -> bool:
    shape = space.shape
    return (
        isinstance(space, spaces.Box)
        and space.dtype == np.uint8
        and shape is not None
        and len(shape) == 3
        and shape[2] == 3
    )
