"""What a harness shows the agent: a screenshot plus optional text."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vlrl.mm import require_canonical


@dataclass(frozen=True, slots=True)
class Element:
    """A labelled, clickable thing on the screen: the text a user reads on it and its box."""

    label: str
    box: tuple[int, int, int, int]
    """``(x, y, width, height)`` in screenshot pixels."""

    @property
    def center(self) -> tuple[int, int]:
        x, y, w, h = self.box
        return x + w // 2, y + h // 2

    def contains(self, px: int, py: int) -> bool:
        x, y, w, h = self.box
        return x <= px < x + w and y <= py < y + h


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
    """What identifies the state the agent is in, for step-level credit (``advantage.step_credit``):
    turns of one group whose states have equal keys are compared with each other. A harness sets
    it where the screenshot alone says too much or too little (a hash of the DOM or of the
    accessibility tree, with a ticking clock left out); None: the screenshot's content hash."""
    elements: tuple[Element, ...] = ()
    """The clickable elements the screen shows with their labels, topmost only, where the harness
    knows them (its widget tree, a DOM, an accessibility tree): what grounding demonstrations
    (``WarmStart.grounding``) are made of."""

    def __post_init__(self) -> None:
        require_canonical(self.screenshot)
        for name in ("goal", "a11y_tree", "url", "state_key"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"observation {name}: expected a string or None, got {type(value).__name__}")
        for element in self.elements:
            self._check_element(element)

    def _check_element(self, element: object) -> None:
        if not isinstance(element, Element):
            raise TypeError(f"observation elements: expected Element items, got {type(element).__name__}")
        x, y, w, h = element.box
        if not element.label or w < 1 or h < 1 or x < 0 or y < 0 or x + w > self.width or y + h > self.height:
            raise ValueError(
                f"observation element {element!r}: expected a non-empty label and a box (x, y, width, height) "
                f"of at least 1x1 inside the {self.width}x{self.height} screenshot"
            )

    @property
    def width(self) -> int:
        return int(self.screenshot.shape[1])

    @property
    def height(self) -> int:
        return int(self.screenshot.shape[0])
