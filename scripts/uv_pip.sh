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
