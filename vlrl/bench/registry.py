"""The benchmark table: name -> where its ``run(size)`` lives (imported only when it runs)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str
    summary: str
    module: str

    def load(self) -> Callable[[str], dict[str, Any]]:
        return importlib.import_module(self.module).run


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in [
        Benchmark(
            "store",
            "payload store put/get throughput per backend; bytes moved by column and range reads vs a full row",
            "vlrl.bench.store_bench",
        ),
        Benchmark(
            "pool",
            "Harness Pool vs one Ray actor per rollout at 24 to 1,024 episodes, and harness calls on threads vs one at a time",
            "vlrl.bench.pool_bench",
        ),
        Benchmark(
            "delta",
            "bytes a multi-turn GUI agent ships: full resend vs last-5 window vs delta, and rollout time;"
            " through vlrl serve and vLLM's own server",
            "vlrl.bench.delta_bench",
        ),
        Benchmark(
            "rollout",
            "the main job's rollouts on the embedded engine and on vLLM side by side: episodes/s, generated tokens/s",
            "vlrl.bench.rollout_bench",
        ),
        Benchmark(
            "pack",
            "planner balance vs Karmarkar-Karp; CP-window fetch vs whole rows; one TP-group copy vs one per rank",
            "vlrl.bench.pack_bench",
        ),
        Benchmark(
            "driver",
            "driver memory scheduling on metadata (payloads in the store) vs a driver that gathers payloads",
            "vlrl.bench.driver_bench",
        ),
        Benchmark(
            "encode",
            "encoder placement: planner + lazy fetch + all-to-all vs token-owner, Vision-DP and vLLM all-gathers",
            "vlrl.bench.encode_bench",
        ),
        Benchmark(
            "train",
            "trainer tokens/s and memory above the pre-step baseline per DP x CP x TP layout vs one process (gloo, CPU)",
            "vlrl.bench.train_bench",
        ),
        Benchmark(
            "lora",
            "LoRA vs full fine-tuning on one trainer process: bytes per weight push, optimizer state, trainer RSS, step time",
            "vlrl.bench.lora_bench",
        ),
        Benchmark(
            "chaos",
            "the main job's training loop under one injected fault per run: survived, books exact, keys left",
            "vlrl.bench.chaos_bench",
        ),
        Benchmark(
            "async",
            "synchronous vs asynchronous RL (overlap, partial rollouts, per-token staleness): step time, success",
            "vlrl.bench.async_bench",
        ),
        Benchmark(
            "learning",
            "the main job's held-out curve on 2-3 task seeds from one warm start against the recorded one:"
            " never below the warm start by more than 0.05 from step 10 on (run after touching driver, loss, engine, trainer)",
            "vlrl.bench.learning_bench",
        ),
        Benchmark(
            "tiles",
            "screenshots stored and shipped as content-addressed tiles on real trajectories: bytes vs raw and PNG,"
            " fetch vs PNG decode, bytes shipped per turn",
            "vlrl.bench.tiles_bench",
        ),
        Benchmark(
            "scale",
            "one RL step's control plane at 1k-16k sequences on a multi-node Ray cluster: CPU and wall per sequence"
            " per stage, driver, store shards, GCS; the stage that saturates",
            "vlrl.bench.scale_bench",
        ),
        Benchmark(
            "xdesktop",
            "a real X desktop instance per task family: reset, step, RSS; a reused instance vs one per episode",
            "vlrl.bench.xdesktop_bench",
        ),
        Benchmark(
            "sandbox",
            "what the bubblewrap sandbox costs a real-program instance (xdesktop, browser): start, reset, step,"
            " memory, against sandbox='none' side by side",
            "vlrl.bench.sandbox_bench",
        ),
    ]
}
