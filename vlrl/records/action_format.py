"""The action grammars a policy may write; each has one strict parser (``rollout.parsers``)."""

from typing import Literal

ActionFormat = Literal["qwen25vl", "qwen3vl", "uitars", "pyautogui"]
"""``qwen25vl`` / ``qwen3vl``: the Qwen computer-use tool call; ``uitars``: UI-TARS-1.5's
``Action:`` line; ``pyautogui``: a safe subset of pyautogui calls."""
