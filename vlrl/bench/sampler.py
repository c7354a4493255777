"""A measurement sampled on a thread while a ``with`` block runs: at entry, every period, at exit."""

from __future__ import annotations

import threading


class Sampler:
    """Calls ``_sample`` at entry, every ``period_s`` on a daemon thread, and at exit."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, name=type(self).__name__, daemon=True)

    def _sample(self) -> None:
        raise NotImplementedError

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self.period_s):
            self._sample()

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
