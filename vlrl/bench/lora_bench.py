"""LoRA vs full fine-tuning: bytes per weight push, trainer memory and step time, side by side.

For each model of the size (the train bench's Qwen2-VL builds: a tiny-width one and, at
``small``/``full``, one of Qwen2-VL-2B's width with a single decoder layer), one trainer process
(1x1x1, gloo, CPU) runs the train bench's measurement (``train_bench.measure_layout``: memory
probes, a warm-up and timed steps of the same batch) twice, with full fine-tuning and with
``lora.rank`` adapters on every linear layer of the LLM (the default patterns), and reports:

- ``push_bytes``: what one weight push carries after the first (every weight, or the adapters);
  ``first_push_bytes``: a LoRA trainer's first push also carries its whole base model;
- ``trainable_params`` and ``optimizer_state_mb`` (AdamW's two moments per trained weight);
- ``peak_mem_mb`` (peak RSS during the steps), ``added_mem_mb`` (its growth from before the
  trainer was built: weights, gradients, optimizer state, activations),
  ``pss_above_baseline_mb`` (peak PSS during the steps over the pre-step baseline) and ``step_s``;
- ``lora_over_full``: each of those, LoRA / full.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from vlrl.bench.train_bench import SIZES as TRAIN_SIZES
from vlrl.bench.train_bench import Size, spawn_layouts
from vlrl.bench.train_workload import ModelSpec, WorkloadSpec

RANK = 16
SINGLE = ((1, 1, 1),)
REAL_WIDTH = replace(
    TRAIN_SIZES["smoke"],
    layouts=SINGLE,
    steps=2,
    dtype="float32",  # one process: no gloo reduction needs float64
    workload=WorkloadSpec(groups=1, members=2, min_tokens=400, max_tokens=800, micro_batch_tokens=800, screen_scale=4),
    model=ModelSpec(hidden=1536, intermediate=8960, layers=1, heads=12, kv_heads=2, vision_depth=1, vision_embed=128),
)
"""Qwen2-VL-2B's LLM width (1536, MLP 8960, 12 heads, 2 KV heads) with one decoder layer."""
MODELS: dict[str, dict[str, Size]] = {
    "smoke": {"tiny_width": replace(TRAIN_SIZES["smoke"], layouts=SINGLE)},
    "small": {"tiny_width": replace(TRAIN_SIZES["smoke"], layouts=SINGLE, steps=3), "real_width_1_layer": REAL_WIDTH},
    "full": {"tiny_width": replace(TRAIN_SIZES["small"], layouts=SINGLE),
             "real_width_1_layer": replace(REAL_WIDTH, steps=5)},
}  # fmt: skip
FIGURES = ("push_bytes", "first_push_bytes", "trainable_params", "optimizer_state_mb", "peak_mem_mb", "added_mem_mb",
           "pss_above_baseline_mb")  # fmt: skip


def measure(size: Size) -> dict[str, Any]:
    """Full fine-tuning and LoRA on ``size``'s model and batch: the figures of each, and LoRA / full."""
    runs = {}
    for name, rank in (("full", 0), ("lora", RANK)):
        figures = spawn_layouts(replace(size, lora_rank=rank), SINGLE)["1x1x1"]
        runs[name] = {key: figures[key] for key in FIGURES} | {"step_s": figures["step_s"]["median"]}
    ratios = {key: runs["lora"][key] / max(runs["full"][key], 1e-9) for key in runs["full"]}
    return {**runs, "lora_over_full": ratios, "model": asdict(size.model), "dtype": size.dtype}


def run(size: str) -> dict[str, Any]:
    """``vlrl bench lora``: LoRA (rank 16) vs full fine-tuning per model of ``size``."""
    return {"rank": RANK, "models": {name: measure(model) for name, model in MODELS[size].items()}}
