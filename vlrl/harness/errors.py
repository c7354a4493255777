"""Errors of the harness contract."""


class HarnessError(RuntimeError):
    """A harness used out of order (step before reset, step after the episode ended) or broken."""


class ActionError(ValueError):
    """An action that is malformed or does not fit the screen it is applied to."""
