"""Strict parsers from model reply text to a ``vlrl.harness.Action``.

Model text is never executed: JSON goes through ``json.loads`` and call syntax through a
hand-written tokenizer that accepts literals only. Anything else raises ``ParseError``, whose
``feedback`` an Agent Loop can send back to the model.
"""

from __future__ import annotations

from vlrl.harness import Action
from vlrl.records import ActionFormat
from vlrl.rollout.parsers.base import MAX_OUTPUT_CHARS, ParseError, Parser, ScreenMap
from vlrl.rollout.parsers.pyautogui_subset import PyAutoGUIParser
from vlrl.rollout.parsers.qwen import QwenParser
from vlrl.rollout.parsers.uitars import UITarsParser

PARSERS: dict[ActionFormat, Parser] = {
    "qwen25vl": QwenParser(normalised=False),
    "qwen3vl": QwenParser(normalised=True),
    "uitars": UITarsParser(),
    "pyautogui": PyAutoGUIParser(),
}
"""Every action format by name; a parser holds no state, so one instance serves all loops."""


def parse_action(text: str, format: ActionFormat, screen: ScreenMap) -> Action:
    """Parse one model reply of ``format`` into an action on ``screen`` (ParseError if malformed)."""
    if format not in PARSERS:
        raise ValueError(f"action format {format!r} is unknown; expected one of {', '.join(PARSERS)}")
    return PARSERS[format].parse(text, screen)


__all__ = [
    "MAX_OUTPUT_CHARS",
    "PARSERS",
    "ParseError",
    "Parser",
    "PyAutoGUIParser",
    "QwenParser",
    "ScreenMap",
    "UITarsParser",
    "parse_action",
]
