"""Shared fixtures: one Ray per test session (starting Ray costs ~9 s and ~1.3 GB here)."""

from __future__ import annotations

import os

import pytest

from tests.cpu_cost import pytest_runtest_makereport, pytest_runtest_protocol, pytest_terminal_summary  # noqa: F401 (hooks)

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
                address="local",  # never a cluster another run (``vlrl bench scale``) has up on the machine
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


SHARED_WORK_UNITS = {
    "tests/e2e/job/test_train_job.py": "canonical run",
    "tests/e2e/job/test_eval.py": "canonical run",
    "tests/integration/harnesses/xdesktop/": "x desktop",
    "tests/e2e/examples/test_training_recipes.py": "x desktop",
    "tests/e2e/bench/test_xdesktop_bench.py": "x desktop",
    "tests/e2e/bench/test_sandbox_bench.py": "x desktop",
}
"""Modules (or folders) that one test worker runs together, besides each module's own tests: the
readers of the canonical run (built once, by the worker that runs them), and every module that
starts X desktops (the xdesktop pool test counts desktop processes machine-wide, so no other
desktop may start beside it)."""
UNITS_BY_PARAMETER = ("tests/vllm/test_engine_families.py",)
"""Modules whose tests form one work unit per parameter (a model family with its own module-scoped
engine), so that the families' engines start on both workers."""
LONGEST_UNITS = ("canonical run", "x desktop", "tests/vllm/test_job_and_server.py")
"""The longest work units (CI's printed durations: 2-7 min of one worker each), started first so
that neither worker is left running one of them alone at the end."""
LANES = ("tests/e2e/", "tests/integration/", "tests/unit/", "tests/vllm/")
"""After the longest units, the lanes' units from the costliest lane to the cheapest: the unit lane's
many small modules fill the workers' last minutes evenly."""


def work_unit(nodeid: str) -> str:
    """The work unit of a test: its shared unit, else its module, or its module and parameter
    (module-scoped pools and engines are built once)."""
    module, _, name = nodeid.partition("::")
    shared = next((unit for prefix, unit in SHARED_WORK_UNITS.items() if module.startswith(prefix)), None)
    if shared:
        return shared
    if module in UNITS_BY_PARAMETER and "[" in name:
        return f"{module}[{name.partition('[')[2]}"
    return module


def run_order(nodeid: str) -> tuple[int, int]:
    """Where a test's work unit starts: the longest units first, then by lane (``LANES``)."""
    unit = work_unit(nodeid)
    if unit in LONGEST_UNITS:
        return (0, LONGEST_UNITS.index(unit))
    return (1, next((i for i, lane in enumerate(LANES) if nodeid.startswith(lane)), len(LANES)))


def pytest_xdist_make_scheduler(config, log):
    """scripts/test.sh runs each lane in pytest-xdist workers; a work unit goes to one worker whole.
    (xdist's own ``xdist_group`` marks do not reach its scheduler under pytest 9.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


def pytest_collection_modifyitems(config, items):
    """Work units start in ``run_order`` (scripts/test.sh keeps the collection's order:
    ``--no-loadscope-reorder``; the sort is stable, so a unit's tests keep theirs)."""
    items.sort(key=lambda item: run_order(item.nodeid))
