"""Processes of the dev cluster known by their PID files."""

from __future__ import annotations

import contextlib
from pathlib import Path


def running(pid_file: Path) -> int | None:
    """The PID in ``pid_file`` if that process is alive: not gone, not a zombie (signal 0 reaches a
    zombie, so it would count as running); None otherwise, or when the file is missing or torn."""
    with contextlib.suppress(OSError, ValueError):
        pid = int(pid_file.read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
            return pid
    return None
