"""The ``browser`` harness codebase: real headless Chromium (Playwright, sync API) running local mini
web apps (a form, a todo list, an email client, a shop checkout), rewarded from the page's state."""

from harnesses.browser.harness import BrowserHarness

__all__ = ["BrowserHarness"]
