#!/usr/bin/env bash
# Set up (if needed) and run the tests by lane; docs/testing.md says what each lane holds.
#
#   bash scripts/test.sh                  every lane: unit, integration and e2e in one pytest run, then vllm
#   bash scripts/test.sh unit [-x ...]    one lane (unit, integration, e2e or vllm), extra pytest arguments after it
#   bash scripts/test.sh tests/unit/store -x    anything else goes to pytest as it is
#
# Tests run in VLRL_TEST_WORKERS pytest-xdist workers (default 2, one a core here; 0 runs in this
# process), a module's tests on one worker, the longest first (tests/conftest.py), and each run
# prints its 30 slowest tests. The whole suite runs the first three lanes in one pytest run, so the
# workers start (with their Rays) once and no worker idles at a lane's end while the other finishes.
# Every test runs even when an earlier one fails, so a CI log shows all failures at once; the exit
# status is non-zero if any test failed. pytest's "no tests collected" (exit 5) is a failure here:
# a lane that should have tests and has none is broken.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_AUTH_MODE=disabled
# The checkout's own bytecode, for the same reason as compile_bytecode (scripts/uv_pip.sh): every
# test process imports vlrl. Only files changed since the last run are compiled again.
.venv/bin/python -m compileall -q -j 0 vlrl tests examples >/dev/null
# One OpenMP thread a process: a test's processes (Ray actors, spawned ranks) outnumber the cores,
# and a second thread only waits for the first (test_trainer_parallel beside two busy cores: 142
# CPU s with the default two threads, 123 with one). The vllm lane keeps vLLM's own setting.
PYTEST=(env OMP_NUM_THREADS=1 .venv/bin/python -m pytest)

LANES=(unit integration e2e vllm)
WORKERS=(-n "${VLRL_TEST_WORKERS:-2}" --no-loadscope-reorder)

# A pytest command line, with exit 5 turned into a failure; prints why.
run_pytest() {
  local status
  set +e
  "$@"
  status=$?
  set -e
  if [[ $status == 5 ]]; then
    echo "test: pytest collected no tests; that is a failure" >&2
    return 1
  fi
  return $status
}

# The vLLM lane runs in .venv-vllm (vLLM pins its own torch); a machine that cannot build that
# environment skips the lane with the reason scripts/setup_vllm.sh gave.
run_vllm() {
  if [[ ! -d tests/vllm ]]; then
    echo "test: vllm lane skipped: tests/vllm does not exist"
    return 0
  fi
  local status=0
  if [[ -n ${VLLM_SETUP_PID:-} ]]; then
    wait "$VLLM_SETUP_PID" || status=$?
    cat "$VLLM_SETUP_LOG"
  else
    bash scripts/setup_vllm.sh || status=$?
  fi
  if [[ $status == 3 ]]; then
    local reason
    reason=$(cat .venv-vllm.unavailable 2>/dev/null || echo "scripts/setup_vllm.sh gave no reason")
    echo "test: vllm lane skipped: ${reason#setup_vllm: }"
    return 0
  fi
  [[ $status == 0 ]] || return $status
  run_pytest .venv-vllm/bin/python -m pytest tests/vllm "${WORKERS[@]}" --durations=30 "$@"
}

run_lane() {
  local lane=$1
  shift
  echo "test: lane $lane"
  if [[ $lane == vllm ]]; then
    run_vllm "$@"
  else
    run_pytest "${PYTEST[@]}" "tests/$lane" "${WORKERS[@]}" --durations=30 "$@"
  fi
}

if [[ $# -gt 0 && " ${LANES[*]} " == *" $1 "* ]]; then
  run_lane "$@"
elif [[ $# -gt 0 ]]; then
  run_pytest "${PYTEST[@]}" "$@"
else
  # vLLM's environment installs while the first lanes run (mostly downloads and disk).
  VLLM_SETUP_LOG=$(mktemp)
  bash scripts/setup_vllm.sh >"$VLLM_SETUP_LOG" 2>&1 &
  VLLM_SETUP_PID=$!
  failed=()
  echo "test: lanes unit, integration and e2e"
  run_pytest "${PYTEST[@]}" tests/unit tests/integration tests/e2e "${WORKERS[@]}" --durations=30 \
    || failed+=("unit/integration/e2e")
  run_lane vllm || failed+=(vllm)
  if [[ ${#failed[@]} -gt 0 ]]; then
    echo "test: failed lanes: ${failed[*]}" >&2
    exit 1
  fi
  echo "test: every lane passed"
fi
