"""The end of a rank that ``mp.spawn`` started for a benchmark, once its figures are written."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_rank() -> NoReturn:
    """Leave without interpreter finalisation: after ``destroy_process_group``, gloo's C++ threads can
    still abort a finishing process ("terminate called without an active exception", SIGABRT; see
    pytorch/pytorch#179291), which would fail a run whose figures are already on disk."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
