#!/usr/bin/env bash
# Set up (if needed) and run the main job.
#
# Until end-to-end training lands, the largest real job that exists runs: policy rollouts of an
# untrained tiny Qwen2-VL (built offline) on desktop click tasks, through the whole rollout side:
# the Harness Pool (loop and env host actors), Agent Loops with multimodal delta shipping, the
# embedded engine, and trajectory payloads written once to the Ray object store.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_AUTH_MODE=disabled
exec .venv/bin/vlrl rollout examples/policy_rollout.py "$@"
