"""MiniWoB++ as a vlrl harness: the miniwob package's task pages in headless Chromium, screenshots
upscaled for the model, MiniWoB's own reward, and a DOM-reading oracle for the default tasks."""

from harnesses.miniwob.browser import TASK_NAMES
from harnesses.miniwob.harness import DEFAULT_TASKS, MiniWoBHarness

__all__ = ["DEFAULT_TASKS", "TASK_NAMES", "MiniWoBHarness"]
