"""An executable file that runs one program inside a sandbox, for programs that another program
starts by path (Playwright and ChromeDriver start Chromium): the starter keeps its pipes and
arguments, and the program runs contained."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from vlrl.harness.sandbox.spec import Sandbox


def sandboxed_executable(
    sandbox: Sandbox,
    program: str,
    script: Path,
    *,
    env: Mapping[str, str],
    cwd: Path,
    replace: Mapping[str, str] = {},
) -> Path:
    """Write ``script``: it runs ``program`` with the arguments it is given inside ``sandbox``.
    An argument ``NAME=value`` whose ``NAME`` is a key of ``replace`` becomes ``NAME=<that value>``
    (a starter's profile folder on the host's ``/tmp`` becomes one the sandbox can write)."""
    cases = "".join(
        f'    {shlex.quote(name)}=*) set -- "$@" {shlex.quote(f"{name}={value}")} ;;\n' for name, value in replace.items()
    )
    lines = [
        "#!/bin/sh",
        "for arg; do",
        "  shift",
        '  case "$arg" in',
        f'{cases}    *) set -- "$@" "$arg" ;;',
        "  esac",
        "done",
        f'exec {shlex.join([*sandbox.launcher(env=env, cwd=cwd), program])} "$@"',
    ]
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o700)
    return script
