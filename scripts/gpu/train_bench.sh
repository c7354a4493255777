#!/usr/bin/env bash
# `vlrl bench train` on NCCL: tokens/s and peak GPU memory of every DP x CP x TP layout that fits
# this machine's GPUs (worlds of 1, 2, 4 and 8), next to the single-process step on gloo/CPU, then
# one merged table (speedup over each backend's 1x1x1, and NCCL over gloo for the same layout).
#
#   scripts/gpu/train_bench.sh [small|full]        # default full
#   env: PYTHON (.venv/bin/python), STEPS (5), DTYPE (float32), OUT (bench-results/train)
#
# One torchrun per layout, so each run's peak memory is its own. The gloo run hides the GPUs. Each
# run's log and JSON line land in $OUT/<backend>-<layout>.{log,json}; a failed layout is named,
# the rest still run, and the script then exits 1. Without a GPU only the gloo reference runs.
set -uo pipefail
cd "$(dirname "$0")/.."
size=${1:-full}
py=${PYTHON:-.venv/bin/python}
steps=${STEPS:-5}
dtype=${DTYPE:-float32}
out=${OUT:-bench-results/train}
mkdir -p "$out"
rm -f "$out"/*.json
failed=()

# TP must divide the bench model's 8 attention and 4 key/value heads.
declare -A LAYOUTS=([1]="1x1x1" [2]="2x1x1 1x2x1 1x1x2" [4]="4x1x1 2x2x1 1x2x2 2x1x2" [8]="8x1x1 2x2x2 4x1x2 1x2x4")

bench() {  # bench BACKEND LAYOUT
  local backend=$1 layout=$2 hide=""
  local world=$((${layout//x/*}))
  [[ $backend == gloo ]] && hide="CUDA_VISIBLE_DEVICES="
  echo "== $backend $layout: $world rank(s)"
  if env $hide "$py" -m torch.distributed.run --standalone --nproc_per_node="$world" -m vlrl.bench.train_bench \
      --size "$size" --layouts "$layout" --steps "$steps" --dtype "$dtype" --json 2>&1 | tee "$out/$backend-$layout.log"; then
    grep '^{' "$out/$backend-$layout.log" | tail -n 1 > "$out/$backend-$layout.json"
  else
    failed+=("$backend $layout")
  fi
}

gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())')
bench gloo 1x1x1
for world in 1 2 4 8; do
  ((world <= gpus)) || break
  for layout in ${LAYOUTS[$world]}; do bench nccl "$layout"; done
done
((gpus > 0)) || echo "no GPU here: only the gloo reference ran"

results=("$out"/*.json)
[[ -e ${results[0]} ]] && echo "== merged" && "$py" -m vlrl.bench.train_bench --merge "${results[@]}" --json
if ((${#failed[@]})); then
  printf 'failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
