#!/usr/bin/env bash
# Set up everything vlrl needs on a fresh Debian machine (Python >= 3.10), idempotently:
# system packages, a virtual environment in .venv, torch, and vlrl with its test extras.
# A re-run with nothing changed returns in about a second (a stamp records what was installed).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
# torch/torchvision: the pair this machine kind serves from local disk (CUDA build, runs on CPU).
TORCH_PINS=(torch==2.14.1 torchvision==0.29.1)
APT_PACKAGES=(chromium chromium-driver  # the browser and MiniWoB++ harnesses drive Debian's Chromium
  xvfb openbox xdotool x11-utils mousepad galculator xterm pcmanfm  # the xdesktop harness: a real X desktop
  bubblewrap)  # the sandbox every real-program harness runs its programs in (vlrl.harness.sandbox)
EXTRAS=${VLRL_EXTRAS:-dev}

source scripts/uv_pip.sh

stamp_now=$( { cat pyproject.toml scripts/setup.sh scripts/uv_pip.sh; echo "${TORCH_PINS[*]} $EXTRAS"; } | sha256sum | cut -c1-16)
stamp_file=$VENV/.vlrl-setup-stamp
if [[ -f $stamp_file && $(cat "$stamp_file") == "$stamp_now" ]]; then
  exit 0
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing system packages: ${missing[*]}"
  SUDO=$([[ $(id -u) == 0 ]] || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if [[ ! -x $VENV/bin/python ]]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
log=$(mktemp)
install_packages() {
  uv_pip "$VENV" "$@" >"$log" 2>&1 \
    || { grep -v "^WARNING: Location" "$log" >&2; echo "setup: installing $* failed" >&2; exit 1; }
}
echo "setup: installing ${TORCH_PINS[*]}"
install_packages "${TORCH_PINS[@]}"
echo "setup: installing vlrl[$EXTRAS]"
install_packages -e ".[$EXTRAS]" "${TORCH_PINS[@]}"
install_packages --no-deps verl==0.9.1  # vlrl bench pack's external Karmarkar-Karp; its imports are in the dev extras
rm -f "$log"
echo "setup: compiling the environment's bytecode"
compile_bytecode "$VENV"
"$VENV/bin/python" -c "import torch, torchvision, ray, transformers, vlrl" \
  || { echo "setup: the environment does not import; see the pip output above" >&2; exit 1; }
echo "$stamp_now" >"$stamp_file"
echo "setup: done"
