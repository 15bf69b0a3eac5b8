"""kwokctl, the program that creates, starts and deletes the local control plane's processes: its
environment (the pinned binaries first on ``PATH``, the clusters' work directory) and its runs.
:mod:`~mlops_platform.devcluster.cluster` decides when; this module only runs it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from mlops_platform.devcluster import binaries


def env(workdir: Path, bins: binaries.Binaries) -> dict[str, str]:
    out = dict(os.environ)
    out["KWOK_WORKDIR"] = str(workdir)
    out["PATH"] = os.pathsep.join([*bins.path_dirs, out.get("PATH", "")])
    return out


def run(
    workdir: Path, bins: binaries.Binaries, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``kwokctl ARGS``, its output captured."""
    return subprocess.run(
        [str(bins["kwokctl"]), *args], env=env(workdir, bins), text=True, capture_output=True, check=check
    )


def create(
    workdir: Path, bins: binaries.Binaries, name: str, config: Path, wait: float, log: Callable[[str], None]
) -> None:
    """``kwokctl create cluster`` from ``config``, each of its log lines to ``log`` as it comes
    (:func:`message`); raises with its last lines when it fails."""
    proc = subprocess.Popen(
        [str(bins["kwokctl"]), "create", "cluster", "--name", name, "--config", str(config),
         "--kubeconfig", "", "--wait", f"{int(wait)}s"],
        env=env(workdir, bins),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        tail = [*tail[-40:], line]
        if line:
            log(f"  kwokctl: {message(line)}")
    if proc.wait() != 0:
        raise RuntimeError(
            f"kwokctl create cluster {name} failed (exit {proc.returncode}):\n" + "\n".join(tail)
        )


def message(line: str) -> str:
    """kwokctl logs JSON lines; show their message and small attributes."""
    try:
        rec = json.loads(line)
    except ValueError:
        return line[:200]
    if not isinstance(rec, dict):
        return line[:200]
    extra = " ".join(
        f"{k}={v}"
        for k, v in rec.items()
        if k not in ("time", "level", "source", "msg") and not isinstance(v, dict) and len(str(v)) < 60
    )
    return f"{rec.get('msg', '')} {extra}".strip()[:200]
