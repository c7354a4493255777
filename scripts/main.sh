#!/usr/bin/env bash
# Set up (if needed) and run the main job.
#
# Until the end-to-end training issue lands, the smallest real job that exists is the payload
# store benchmark: it starts Ray and TransferQueue and moves realistic rollout payloads (a
# 4k-token sequence with logprobs, masks and 15 screenshots at 1280x720) through every store
# backend, printing throughput and how few bytes column and range reads move.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_AUTH_MODE=disabled
exec .venv/bin/vlrl bench store "$@"
