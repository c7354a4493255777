"""What a harness shows the agent: a screenshot plus optional text."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vlrl.mm import require_canonical


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """One observation. Actions refer to pixels of ``screenshot``."""

    screenshot: np.ndarray
    """Canonical RGB ``uint8 [H, W, 3]``."""
    goal: str | None = None
    """The task instruction, in words."""
    a11y_tree: str | None = None
    """Accessibility tree as text, where the harness has one."""
    url: str | None = None
    """Current page address (browser harnesses)."""
    state_key: str | None = None
    """What identifies the state the agent is in, for step-level credit (``hook.step_credit``):
    turns of one group whose states have equal keys are compared with each other. A harness sets
    it where the screenshot alone says too much or too little (a hash of the DOM or of the
    accessibility tree, with a ticking clock left out); None: the screenshot's content hash."""

    def __post_init__(self) -> None:
        require_canonical(self.screenshot)
        for name in ("goal", "a11y_tree", "url", "state_key"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"observation {name}: expected a string or None, got {type(value).__name__}")

    @property
    def width(self) -> int:
        return int(self.screenshot.shape[1])

    @property
    def height(self) -> int:
        return int(self.screenshot.shape[0])
