"""An instance's folder on the host: ``<tmp>/<prefix><host pid>-<random>``, whose ``box`` the
sandbox shares (a tmpfs where the host is root). Folders of host processes that died without
closing their instances are swept by the next instance made with the same prefix."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from vlrl.harness.sandbox.processes import alive


def instance_folder(prefix: str) -> Path:
    sweep_orphans(prefix)
    root = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    root.chmod(0o711)  # the sandbox's user passes through to its box and lists nothing here
    return root


def remove_folder(root: Path) -> None:
    subprocess.run(["umount", "-l", str(root / "box")], capture_output=True, check=False)
    shutil.rmtree(root, ignore_errors=True)


def sweep_orphans(prefix: str) -> None:
    for folder in Path(tempfile.gettempdir()).glob(f"{prefix}*-*"):
        pid = folder.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not alive(int(pid)):
            remove_folder(folder)
