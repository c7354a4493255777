"""Shared fixtures: one Ray per test session (starting Ray costs ~9 s and ~1.3 GB here)."""

from __future__ import annotations

import os

import pytest

# Tests only: the many short-lived local Rays of a test run go without tokens (vlrl itself never
# turns Ray's token authentication off; scripts/test.sh exports the same for CI).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Ray workers inherit this environment: let them import test-only harnesses from ``tests``.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)
os.environ.setdefault("RAY_DEDUP_LOGS", "0")

RAY_LOGICAL_CPUS = 8
"""Logical CPUs are scheduling tokens: TransferQueue reserves three, test actors ask for none."""
RAY_START_ATTEMPTS = 3
"""Ray waits a fixed 30 s for its raylet to register; two test workers starting Ray at once on a
busy 2-core machine can miss that, and a second try finds the machine less busy."""


@pytest.fixture(scope="session")
def ray_session():
    import ray

    for attempt in range(RAY_START_ATTEMPTS):
        try:
            ray.init(
                num_cpus=RAY_LOGICAL_CPUS,
                include_dashboard=False,
                object_store_memory=512 * 1024**2,
                log_to_driver=False,
                configure_logging=False,
            )
            break
        except Exception as err:  # Ray raises a bare Exception for it
            if "timed out during startup" not in str(err) or attempt == RAY_START_ATTEMPTS - 1:
                raise
            ray.shutdown()
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory):
    """One tiny Qwen2-VL checkpoint per test session, built offline in seconds."""
    from vlrl.models import build_tiny

    return build_tiny("qwen2_vl", tmp_path_factory.mktemp("tiny-qwen2vl"))


@pytest.fixture(scope="session")
def processor(tiny_path):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(tiny_path)


ONE_WORKER_FOLDERS = ("tests/integration/harnesses/xdesktop/",)
"""Folders whose tests run on one worker: the X desktop's pool test counts desktop processes
machine-wide, so the folder's other modules must not start theirs meanwhile."""


def pytest_collection_modifyitems(config, items):
    """Work units for pytest-xdist's ``--dist loadgroup`` (scripts/test.sh runs each lane in two
    workers): a module's tests stay on one worker, so its module-scoped pools are
    built once, and every reader of the e2e lane's canonical run shares the worker that builds it.
    That run is the longest unit, so it goes first."""
    for item in items:
        module = item.nodeid.split("::")[0]
        if "finished_run" in item.fixturenames:
            group = "canonical-run"
        else:
            group = next((folder for folder in ONE_WORKER_FOLDERS if module.startswith(folder)), module)
        item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: "finished_run" not in item.fixturenames)
