#!/usr/bin/env bash
# Set up (if needed) and run the main job: train a GUI agent end to end.
#
# `vlrl train examples/train_click.py`: an untrained tiny Qwen2-VL (built offline) learns the
# desktop click-target task on 2 CPU cores in about 6 minutes. A local Ray runs the Harness Pool
# (loop and env host actors), Agent Loops with multimodal delta shipping, the embedded engine, the
# Ray payload store, the driver, the trainer (packer, encoder path, GRPO) and weight sync; a
# supervised warm start on oracle demonstrations comes first. It ends with a JSON summary line
# (success_first, success_warm_start, success_last on held-out seeds, steps, wall_s) and writes
# metrics, TensorBoard events, checkpoints and plots to runs/train_click/.
# Extra arguments go to `vlrl train` (--resume, --set steps=60, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/vlrl train examples/train_click.py "$@"
