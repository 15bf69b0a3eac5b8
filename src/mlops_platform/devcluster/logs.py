"""The log files of the processes the tooling starts (control plane, operators, servers)."""

from __future__ import annotations

from pathlib import Path


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of the log at ``path``, for a failure message (never raises)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"
