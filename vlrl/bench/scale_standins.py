"""Stand-ins for the engine, the harness and the judge in ``vlrl bench scale``.

Only the model and the environment are replaced; what a trajectory hands the control plane is
real. ``StandInEpisode`` is a loop-host tenant that plays ``turns`` requests against a simulated
engine and screen, growing a real ``rollout.trajectory.Trajectory``, and ends through its real
``finish`` (every ``SeqMeta`` built and checked, the payload written once, each distinct screen
once as tiles, each sequence holding a reference per screen, under the tenant's write ledger):

- a turn's prompt is ``PROMPT_TEXT_TOKENS`` text ids and the screenshot's placeholder block
  (``PatchRule`` tokens of a ``SCREEN`` image: 1,196 at 1280x720), its answer
  ``RESPONSE_TOKENS`` sampled ids with their logprobs and, as a mixture-of-experts engine
  records it, ``extra/routed_experts`` ``(tokens, MOE_LAYERS, TOP_K)`` uint8 for the prompt it
  computed and the ids it sampled;
- screenshots are 1280x720 RGB: a flat screen per task seed whose turns each change
  ``CHANGED_TILES`` 64-pixel tiles, so the trajectories of a group share their screens by
  content hash (one task, one screen sequence) and the store keeps each changed tile once;
- the latency model sleeps what a batched engine and a remote screen would take: prefill and
  decode seconds per token, and an env step per turn.

Every trajectory of a group has both outcomes (even sample indices succeed), so the pass-rate
sampler accepts every group and a step's sequence count is exact. ``StandInJudge`` is the group
grader: it keeps the rollout's rewards after ``latency_s``.

Each loop host keeps a ``FinishMeter`` (``FINISH``, one per process): the thread CPU and wall
seconds of every ``finish``, and the payload bytes its store client wrote, which the bench reads
from each host after a step.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vlrl.mm import PatchRule
from vlrl.pool.tenant import TenantContext
from vlrl.records import SeqMeta
from vlrl.rollout.chat import Segment
from vlrl.rollout.client import ContextImage
from vlrl.rollout.protocol import GenerateResult
from vlrl.rollout.trajectory import Trajectory

SCREEN = (720, 1280)
"""Screenshot height and width (pixels)."""
TILE = 64
CHANGED_TILES = 2
"""Tiles of the screen a turn changes."""
PROMPT_TEXT_TOKENS = 64
RESPONSE_TOKENS = (32, 96)
"""Sampled ids per turn, drawn in ``[low, high)``."""
TURNS = (1, 5)
"""Turns per trajectory, drawn in ``[low, high)`` per task seed."""
MOE_LAYERS, TOP_K = 4, 2
"""Routing record per token: the tiny Qwen3-VL-MoE's shape (4 MoE layers, top-2), 8 bytes a token."""
IMAGE_PAD = 151_655
RULE = PatchRule()


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Seconds a turn waits on the engine and the environment (no CPU is spent: it sleeps)."""

    prefill_s_per_token: float = 2e-6
    decode_s_per_token: float = 1e-3
    env_step_s: float = 0.05

    def turn_s(self, prefill_tokens: int, sampled: int) -> float:
        return prefill_tokens * self.prefill_s_per_token + sampled * self.decode_s_per_token + self.env_step_s


class FinishMeter:
    """CPU (of the finishing thread) and wall seconds of this process's ``finish`` calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sequences = 0
        self.cpu_s = 0.0
        self.wall_s = 0.0

    def add(self, sequences: int, cpu_s: float, wall_s: float) -> None:
        with self._lock:
            self.sequences += sequences
            self.cpu_s += cpu_s
            self.wall_s += wall_s

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return {"sequences": self.sequences, "cpu_s": self.cpu_s, "wall_s": self.wall_s}


FINISH = FinishMeter()
"""This process's finish figures (a loop host's, when read through ``finish_figures``)."""


def finish_figures(host: Any) -> dict[str, float]:
    """``FINISH`` of loop host ``host``'s process, with the payload bytes its store client wrote."""
    import ray

    def read(_: Any) -> dict[str, float]:
        from vlrl.bench import scale_standins

        figures = scale_standins.FINISH.snapshot()
        store = scale_standins.HOST_STORE.get("store")
        figures["bytes_written"] = store.io_stats().bytes_written if store is not None else 0
        return figures

    return ray.get(host.__ray_call__.remote(read))


HOST_STORE: dict[str, Any] = {}
"""The store client of this loop host (set by ``StoreSetup``)."""


@dataclass(frozen=True, slots=True)
class StoreSetup:
    """A loop host's shared resources: the run's store (built once per host)."""

    store_config: Any

    def __call__(self) -> dict[str, Any]:
        HOST_STORE["store"] = self.store_config.build()
        return dict(HOST_STORE)


@functools.lru_cache(maxsize=128)  # 2.6 MiB each: the groups a loop host plays at once, not all of them
def screen(task_seed: int, turn: int) -> ContextImage:
    """The screenshot of ``turn`` of task ``task_seed``: a flat screen, and the tiles changed by
    this and every earlier turn (each turn's drawn from its own seed)."""
    height, width = SCREEN
    pixels = np.full((height, width, 3), task_seed % 251, np.uint8)
    for t in range(turn + 1):
        rng = np.random.default_rng([task_seed, t])
        for _ in range(CHANGED_TILES):
            y, x = rng.integers(0, height // TILE) * TILE, rng.integers(0, width // TILE) * TILE
            pixels[y : y + TILE, x : x + TILE] = rng.integers(0, 256, (TILE, TILE, 3), np.uint8)
    pixels.flags.writeable = False
    return ContextImage.of(pixels)


def image_tokens() -> int:
    """Placeholder tokens of one screenshot under ``RULE``."""
    return RULE.num_tokens(SCREEN[1], SCREEN[0])


@dataclass(frozen=True, slots=True)
class StandInEpisode:
    """One trajectory of a group, played against the simulated engine and screen (a tenant)."""

    source: str
    seed: int
    group_id: str
    index: int
    latency: LatencyModel

    async def run(self, ctx: TenantContext) -> list[SeqMeta]:
        rng = np.random.default_rng([self.seed, self.index])
        turns = int(np.random.default_rng(self.seed).integers(*TURNS))  # one task, one length
        trajectory = Trajectory(f"{self.group_id}/{self.index}")
        ids: list[int] = []
        offsets: list[int] = []
        images: list[ContextImage] = []
        for turn in range(turns):
            image = screen(self.seed, turn)
            text = rng.integers(0, 151_000, PROMPT_TEXT_TOKENS).tolist()
            offsets.append(len(ids) + len(text))
            prompt = [*ids, *text, *[IMAGE_PAD] * image_tokens()]
            images.append(image)
            trajectory.set_context(Segment(prompt, list(offsets)), list(images))
            result = self._generate(rng, f"{self.group_id}/{self.index}#{turn}", len(prompt) - len(ids))
            await asyncio.sleep(self.latency.turn_s(result.prefill_tokens, len(result.token_ids)))
            trajectory.add_generated(result, image.content_hash)
            ids = [*prompt, *result.token_ids.tolist()]
        success = self.index % 2 == 0
        return await ctx.to_thread(self._finish, trajectory, ctx, success, turns)

    def _generate(self, rng: np.random.Generator, request_id: str, prefill: int) -> GenerateResult:
        n = int(rng.integers(*RESPONSE_TOKENS))
        routing = rng.integers(1, 65, (n + prefill, MOE_LAYERS, TOP_K), dtype=np.uint8)  # expert id + 1
        return GenerateResult(
            request_id=request_id,
            token_ids=rng.integers(0, 151_000, n).astype(np.int32),
            logprobs=-rng.exponential(1.0, n).astype(np.float32),
            finish_reason="stop",
            policy_version=0,
            prefill_tokens=prefill,
            reused_prefix_tokens=0,
            extras={"routed_experts": routing[:n]},
            prompt_extras={"routed_experts": routing[n:]},
        )

    def _finish(self, trajectory: Trajectory, ctx: TenantContext, success: bool, turns: int) -> list[SeqMeta]:
        cpu, wall = time.thread_time(), time.perf_counter()
        metas = trajectory.finish(
            ctx.shared["store"],
            key=f"seq/{self.group_id}/{self.index}",
            group_id=self.group_id,
            source=self.source,
            sample_index=self.index,
            reward=float(success),
            success=success,
            finish="done",
            patch_rule=RULE,
            turn_rewards=(0.0,) * (turns - 1) + (float(success),),
            ledger=ctx.writes,
        )
        FINISH.add(len(metas), time.thread_time() - cpu, time.perf_counter() - wall)
        return metas


@dataclass(frozen=True, slots=True)
class StandInJudge:
    """A group grader that answers after ``latency_s`` with the rollout's own rewards."""

    latency_s: float = 0.02

    async def grade(self, metas: Sequence[SeqMeta]) -> list[float]:
        await asyncio.sleep(self.latency_s)
        return [m.reward for m in metas]
