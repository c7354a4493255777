"""What a run's episodes run on, started and ended in one place: ``vlrl train`` (its session),
``vlrl eval`` and ``vlrl rollout`` each hold one ``RolloutRuntime`` while they play.

``with RolloutRuntime(side) as runtime:`` starts, in this order, each step only once the ones
before it stand:

1. Ray (``ray_for_run``): a process already connected keeps its Ray; else the cluster at
   ``ray.address`` is joined, or a local Ray of the run's own is started, whose every process
   ends with the run (``job.processes``);
2. the policy checkpoint: ``model_path``, or the tiny build (``side.tiny``) in the folder given,
   kept there when it holds one already (a resumed run's), else in a scratch folder;
3. its processor: the sources' screenshot budgets checked against its patch rule before any
   engine starts, and the ``annotator`` that draws episodes;
4. the payload store, the engine replicas (none where an ``endpoint`` serves the episodes) and
   an OPD teacher's replica;
5. the Harness Pool, whose loop hosts reach the engines (or the endpoint) and the store.

However the ``with`` block ends (an error in any step, in the run, or a signal), what started
ends in reverse: the pool shut down, the teacher and the engines killed, the store destroyed, the
scratch folder removed, a Ray the runtime started shut down. One of them failing to end does not
keep the others from ending (``contextlib.ExitStack``; the error is raised after them). The
store's keys are their owners' to release before the block ends; ``keys_left`` is what a run
reports of them.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vlrl.config import DataSource
from vlrl.job.evaluate import Annotator
from vlrl.job.processes import handle_sigterm, run_processes
from vlrl.pool.ray_runtime import RayRuntime
from vlrl.rollout.engine import EmbeddedEngine, VLLMEngine
from vlrl.rollout.http_endpoint import OpenAIEndpoint
from vlrl.rollout.loop_setup import LoopSetup
from vlrl.rollout.rollout_side import TINY, RolloutSide

if TYPE_CHECKING:
    from vlrl.job.distill import Teacher


@contextlib.contextmanager
def ray_for_run(config: RayRuntime) -> Iterator[None]:
    """Ray while a run lasts: a process already connected keeps its Ray as it is; otherwise
    ``config`` joins its cluster or starts a local Ray, shut down when the run ends. A local Ray
    is the run's own: its processes end with the run and SIGTERM unwinds the run as SIGINT does
    (``job.processes``; set again after ``ray.init``, which installs Ray's own handler)."""
    import ray

    local = config.address is None and not ray.is_initialized()
    with run_processes() if local else contextlib.nullcontext():
        started = config.ensure()
        if local:
            handle_sigterm()
        try:
            yield
        finally:
            if started:
                ray.shutdown()


class RolloutRuntime:
    """Ray, the policy, its engines, the store and the Harness Pool of one run (the module
    docstring): ``model_path``, ``annotator``, ``engines``, ``teacher``, ``store`` and ``pool``
    while the ``with`` block lasts."""

    def __init__(
        self,
        side: RolloutSide,
        *,
        engine: EmbeddedEngine.Config | VLLMEngine.Config | None = None,
        model_path: str | None = None,
        endpoint: OpenAIEndpoint.Config | None = None,
        teacher: Teacher | None = None,
    ) -> None:
        """``side``: the run's rollout settings (a ``TrainJob``, ``EvalJob`` or ``PolicyRollout``
        config). ``engine``: every replica's config as built (None: ``side.engine``; the training
        job's run plan resolves its own). ``model_path``: the checkpoint served in place of
        ``side.model_path`` (an evaluated adapter merged into its base), or, when that is 'tiny',
        the folder the tiny build is made in (None: a scratch folder, removed at the end).
        ``endpoint``: a server that serves the episodes instead of engine replicas.
        ``teacher``: the OPD teacher, started on its own replica."""
        self.side = side
        self._engine = side.engine if engine is None else engine
        self._model_path = model_path
        self._endpoint = endpoint
        self._teacher = teacher
        self._ends = contextlib.ExitStack()
        self.engines: list[Any] = []
        self.teacher: Any = None

    def __enter__(self) -> RolloutRuntime:
        try:
            self._start()
        except BaseException:
            self._ends.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ends.__exit__(*exc)

    def _start(self) -> None:
        import ray
        from transformers import AutoProcessor

        from vlrl.mm import patch_rule_of

        side, ends = self.side, self._ends
        ends.enter_context(ray_for_run(side.ray))
        self.model_path = self._policy()
        processor = AutoProcessor.from_pretrained(self.model_path)
        rule = patch_rule_of(processor)
        _check_screenshot_budgets(side.sources, rule)  # before any engine starts
        self.annotator = Annotator(processor.tokenizer, rule)
        self.store = side.store.build()
        ends.callback(self.store.destroy)
        ends.callback(_kill, ray, self.engines)  # those started, should a later one fail to
        if self._endpoint is None:
            for _ in range(side.replicas):
                self.engines.append(self._engine.build(model_path=self.model_path))
        if self._teacher is not None:
            self.teacher = self._teacher.start(self.model_path)
            ends.callback(ray.kill, self.teacher)
        http = () if self._endpoint is None else (self._endpoint,)
        setup = LoopSetup(self.model_path, tuple(self.engines), self.store, side.client, http)
        self.pool = side.pool.build(loop_setup=setup)
        ends.callback(self.pool.shutdown)

    def _policy(self) -> str:
        """The checkpoint folder served: the one given, or the tiny build, made first."""
        side = self.side
        if side.model_path != TINY:
            return self._model_path or side.model_path
        if self._model_path is None:
            folder = Path(self._ends.enter_context(tempfile.TemporaryDirectory(prefix="vlrl-model-"))) / "tiny"
        else:
            folder = Path(self._model_path)
        if not (folder / "config.json").exists():  # a resumed run's build is kept
            side.tiny.build(folder)
        return str(folder)

    def keys_left(self) -> int:
        """Keys in the store now: 0 once every owner has released its own."""
        return self.store.stats().keys


def _check_screenshot_budgets(sources: list[DataSource], rule: Any) -> None:
    """Refuse a source's downscale budget for older screenshots that its screen size cannot meet
    under the policy's patch rule (``rollout.screen_history``)."""
    from vlrl.rollout.screen_history import check_older_image_tokens

    for i, source in enumerate(sources):
        if source.env.width and source.env.height:
            field = f"sources[{i}].agent.older_image_tokens"
            check_older_image_tokens(source.agent, rule, source.env.width, source.env.height, field)


def _kill(ray: Any, actors: list[Any]) -> None:
    for actor in actors:
        ray.kill(actor)
