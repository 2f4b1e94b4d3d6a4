"""A peer from the package registry in its own venv under the benchmarks' cache folder, installed on first use."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def installed_peer(package: str, version: str, command: str) -> tuple[Path | None, str]:
    """(the peer's `command` in its venv, "") or (None, why it cannot be had); a failed install leaves nothing."""
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "capcon-bench" / f"{package}-{version}"
    binary = home / "bin" / command
    if binary.exists():
        return binary, ""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, capture_output=True, timeout=300)
        subprocess.run(
            [str(home / "bin" / "pip"), "install", "-q", f"{package}=={version}"],
            check=True,
            capture_output=True,
            timeout=900,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as error:
        detail = getattr(error, "stderr", b"") or b""
        shutil.rmtree(home, ignore_errors=True)
        return None, f"cannot install {package}=={version}: {detail.decode(errors='replace').strip()[-200:] or error}"
    return (binary, "") if binary.exists() else (None, f"{package}=={version} installed no {command} command")
