"""A real Linux desktop (Xvfb, openbox) with real applications (Mousepad, Galculator, PCManFM,
xterm); tasks are checked by the state they leave behind, as OSWorld does."""

from harnesses.xdesktop.harness import XDesktopHarness

__all__ = ["XDesktopHarness"]
