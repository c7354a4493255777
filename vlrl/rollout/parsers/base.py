"""What every action parser shares: the error a model can read, the mapping from the image the
model saw to the screen, and the checks around each parse (input size, Action validation, bounds)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from vlrl.errors import PicklesWhole
from vlrl.harness import Action, ActionError

MAX_OUTPUT_CHARS = 8192
"""Longer replies are refused before any parsing: one action never needs more."""
DEFAULT_WAIT_S = 5.0
"""Seconds a wait without a duration lasts (UI-TARS documents ``wait()`` as a 5 s sleep)."""
OVERSHOOT = 1.05
"""Points up to 5% past the image's right or bottom edge are clamped onto the screen; farther
ones are refused, since the model is then not pointing at anything it saw."""
NORMALISED_MAX = 999
"""Qwen3-VL writes points on a 0..999 grid over the image."""

_FENCE = re.compile(r"^[ \t]*```(?:[\w+-]*[ \t]*\n)?(.*?)```", re.DOTALL | re.MULTILINE)


class ParseError(PicklesWhole, ValueError):
    """Model text that is not one well-formed action; ``feedback`` says what was wrong and what
    form was expected, short enough for an Agent Loop to send back to the model."""

    def __init__(self, feedback: str) -> None:
        super().__init__(feedback)
        self.feedback = feedback


@dataclass(frozen=True, slots=True)
class ScreenMap:
    """The screen an action runs on and the size of the image of it the model saw.

    Models see the screenshot resized (e.g. by Qwen2-VL's smart resize to multiples of 28), so
    the points they write are mapped back to screen pixels, rounded and clamped into the screen.
    """

    screen_width: int
    """Pixels of the screen (the harness's screenshot) that actions run on."""
    screen_height: int
    image_width: int
    """Pixels of the image the model was shown, after resizing."""
    image_height: int

    def __post_init__(self) -> None:
        for name in ("screen_width", "screen_height", "image_width", "image_height"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ScreenMap.{name}={value!r}; expected a positive int")

    def from_image(self, x: float, y: float) -> tuple[int, int]:
        """Map a point in pixels of the image the model saw: ``x * screen_width / image_width``."""
        w, h = self.image_width, self.image_height
        if not (0 <= x <= w * OVERSHOOT and 0 <= y <= h * OVERSHOOT):  # False for NaN too
            raise ParseError(
                f"point ({x}, {y}) is outside the {w}x{h} screenshot; expected 0 <= x < {w} and 0 <= y < {h}"
            )
        sx, sy = self.screen_width / w, self.screen_height / h
        return _clamp(x * sx, self.screen_width), _clamp(y * sy, self.screen_height)

    def from_normalised(self, x: float, y: float) -> tuple[int, int]:
        """Map a point on the 0..999 grid: ``x / 999 * (screen_width - 1)``, so 0 and 999 land on
        the first and last pixel of the screen."""
        if not (0 <= x <= NORMALISED_MAX and 0 <= y <= NORMALISED_MAX):
            raise ParseError(
                f"point ({x}, {y}) is off the normalised grid; expected 0 <= x <= {NORMALISED_MAX} "
                f"and 0 <= y <= {NORMALISED_MAX}"
            )
        sx, sy = (self.screen_width - 1) / NORMALISED_MAX, (self.screen_height - 1) / NORMALISED_MAX
        return _clamp(x * sx, self.screen_width), _clamp(y * sy, self.screen_height)

    def centre(self) -> tuple[int, int]:
        """Where a scroll without a point happens: the parser cannot know the pointer's position."""
        return self.screen_width // 2, self.screen_height // 2


class Parser(ABC):
    """One output format: ``parse`` turns a reply into an Action, ``describe`` states the grammar."""

    def parse(self, text: str, screen: ScreenMap) -> Action:
        """Return the one action ``text`` asks for on ``screen``; raise ParseError for anything else."""
        if len(text) > MAX_OUTPUT_CHARS:
            raise ParseError(
                f"reply of {len(text)} characters is too long; expected one action in at most {MAX_OUTPUT_CHARS}"
            )
        try:
            action = self._parse(text, screen)
            action.check_bounds(screen.screen_width, screen.screen_height)
        except ActionError as err:
            raise ParseError(str(err)) from err
        return action

    @abstractmethod
    def _parse(self, text: str, screen: ScreenMap) -> Action:
        """Parse a reply already known to be of bounded size; may raise ActionError."""

    @abstractmethod
    def describe(self) -> str:
        """A short statement of the accepted grammar, for system prompts and docs."""


def unfence(text: str) -> str:
    """Return the body of the one fenced code block in ``text`` (prose around it is ignored), or
    ``text`` itself when it has none: models often wrap their action in a Markdown fence."""
    blocks = _FENCE.findall(text)
    if len(blocks) > 1:
        raise ParseError(f"found {len(blocks)} code blocks; expected one action per reply")
    return blocks[0] if blocks else text


def brief(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, so feedback never echoes a whole reply back."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clamp(value: float, size: int) -> int:
    return min(max(round(value), 0), size - 1)
