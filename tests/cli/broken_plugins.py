"""A harness that passes the construct-time rules but breaks the behaviour contract's 'order'."""

from harnesses.desktop import DesktopHarness


class Endless(DesktopHarness):
    """Never terminates, not even on a ``fail`` action."""

    def step(self, action):
        obs, reward, _, truncated, info = super().step(action)
        return obs, reward, False, truncated, info
