#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite, slow end-to-end tests included.
# Extra arguments go to pytest. pytest's "no tests collected" (exit 5) is a failure here.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export RAY_AUTH_MODE=disabled
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [[ $status == 5 ]]; then
  echo "test: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit $status
