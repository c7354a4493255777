"""MiniWoB++ as a vlrl harness: the miniwob package's task pages in headless Chromium, screenshots
upscaled for the model, MiniWoB's own reward, and a DOM-reading oracle for the default tasks;
``suite="all"`` offers every bundled page, for evaluation."""

from harnesses.miniwob.browser import TASK_NAMES
from harnesses.miniwob.harness import DEFAULT_TASKS, SUITES, MiniWoBHarness

__all__ = ["DEFAULT_TASKS", "SUITES", "TASK_NAMES", "MiniWoBHarness"]
