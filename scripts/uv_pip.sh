# Sourced by the setup scripts: `uv_pip VENV ARGS...` installs into VENV with uv's pip interface.
#
# uv resolves like pip but downloads and unpacks in parallel: torch, torchvision and vlrl[dev]
# into a fresh environment took 31 s with uv and 121 s with pip on this machine kind. uv does not
# read pip's configuration, so the machine's find-links, indexes and constraints (pip.conf and
# PIP_* variables, as `pip config list` shows them) are passed on, and indexes are searched as pip
# searches them (the best match across all of them).
UV_VERSION=0.13.9

uv_pip() {
  local venv=$1 key value item
  shift
  [[ -x $venv/bin/uv ]] || "$venv/bin/python" -m pip install --disable-pip-version-check -q "uv==$UV_VERSION"
  local args=(--python "$venv/bin/python" --index-strategy unsafe-best-match)
  while IFS='=' read -r key value; do
    value=${value#\'}
    value=${value%\'}
    for item in $value; do
      case ${key##*.} in
        find-links) args+=(--find-links "$item") ;;
        index-url) args+=(--default-index "$item") ;;
        extra-index-url) args+=(--index "$item") ;;
        constraint) args+=(--constraint "$item") ;;
      esac
    done
  done < <("$venv/bin/python" -m pip config list 2>/dev/null)
  "$venv/bin/uv" pip install --quiet "${args[@]}" "$@"
}

# `compile_bytecode VENV`: writes the bytecode of everything installed in VENV, once, at set-up.
# uv leaves it to the first import, and where PYTHONDONTWRITEBYTECODE is set (this machine kind
# sets it) no import ever writes it: every process then compiled torch, transformers and Ray from
# source again. Measured on a fresh clone: the canonical-run tests cost 290 CPU s without bytecode
# and 180 with it; compiling site-packages costs about 66 CPU s once. A few files that need a
# newer Python (torch's py312 test helpers) do not compile; nothing imports them.
compile_bytecode() {
  local venv=$1
  "$venv/bin/python" -m compileall -q -j 0 "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    >/dev/null 2>&1 || true
}
