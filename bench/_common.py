"""Helpers shared by the benchmark scripts in this folder (``runtime_rss.py``, ``operator_footprint.py``).

``bench/`` is not a package: the scripts import this module as a sibling (``from _common import ...``),
which works because Python puts a script's own directory first on ``sys.path`` when it is run as
``.venv/bin/python bench/<script>.py``.

Only what the scripts do exactly alike lives here. The project (``mlops_platform``) is imported inside
the functions that need it, never at module level, as the scripts themselves do.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlops_platform.runtime.client import JSON, Client

MIB = 1024 * 1024


# ---------------------------------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------------------------------


def log(msg: str) -> None:
    """Print a progress line, prefixed with the wall-clock time, to stderr (stdout is for results)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def mib(n: float) -> str:
    """``n`` bytes as MiB with one decimal, without the unit (``"12.3"``)."""
    return f"{n / MIB:.1f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table of ``header`` and ``rows`` (cells already formatted), without a final newline."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write_json(path: str | Path, data: object) -> None:
    """Write ``data`` to ``path`` as indented JSON with a final newline, and log that it was written."""
    Path(path).write_text(json.dumps(data, indent=2) + "\n")
    log(f"wrote {path}")


# ---------------------------------------------------------------------------------------------------
# the local dev cluster (`mlops-platform dev up/down`)
# ---------------------------------------------------------------------------------------------------


def cli_binary() -> list[str]:
    """The command that runs the ``mlops-platform`` CLI: the one next to the interpreter, else on PATH.

    Exits (``SystemExit``) when there is neither.
    """
    exe = Path(sys.executable).parent / "mlops-platform"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("mlops-platform")
    if found:
        return [found]
    raise SystemExit("mlops-platform CLI not found next to the interpreter nor on PATH; use --kubeconfig")


def dev_cluster_up(name: str) -> tuple[str, float]:
    """Start the local dev cluster ``name``; return (its kubeconfig path, the seconds ``dev up`` took).

    The kubeconfig path is the last non-empty line ``dev up`` prints on stdout; its stderr (progress)
    passes through. Exits (``SystemExit``) when ``dev up`` fails.
    """
    cmd = [*cli_binary(), "dev", "up", "--name", name]
    log(f"starting the local dev cluster: {' '.join(cmd)}")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"`{' '.join(cmd)}` failed with exit code {proc.returncode}")
    path = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()][-1]
    seconds = time.perf_counter() - t0
    log(f"cluster {name} up in {seconds:.1f} s, kubeconfig {path}")
    return path, seconds


def dev_cluster_down(name: str) -> None:
    """Take the local dev cluster ``name`` down (``dev down``); a failure is not an error here."""
    cmd = [*cli_binary(), "dev", "down", "--name", name]
    log(f"taking the dev cluster down: {' '.join(cmd)}")
    subprocess.run(cmd, check=False)


# ---------------------------------------------------------------------------------------------------
# namespaces
# ---------------------------------------------------------------------------------------------------


async def wait_while_terminating(client: Client, namespace: str) -> JSON | None:
    """Wait (up to 300 s, polling every 2 s) while ``namespace`` is ``Terminating``.

    A namespace left ``Terminating`` by an earlier cleanup must be gone before it can be created again.
    Returns the namespace object if it exists and is not ``Terminating``, ``None`` if it does not exist;
    exits (``SystemExit``) if it is still ``Terminating`` after 300 s.
    """
    from mlops_platform.runtime import client as kclient
    from mlops_platform.runtime import resources

    deadline = time.monotonic() + 300
    while True:
        try:
            ns = await client.get(resources.NAMESPACE, namespace)
        except kclient.ApiError as e:
            if not e.not_found:
                raise
            return None
        if (ns.get("status") or {}).get("phase") != "Terminating":
            return ns
        if time.monotonic() > deadline:
            raise SystemExit(f"namespace {namespace} is still Terminating after 300 s")
        log(f"namespace {namespace} is Terminating; waiting")
        await asyncio.sleep(2)


async def delete_namespace(
    client: Client, namespace: str, wait: float, poll: float, *, digits: int = 1
) -> float | None:
    """Delete ``namespace`` (background propagation) and poll every ``poll`` s until it is gone.

    Returns the seconds until it was gone (``0.0`` if it did not exist), or ``None`` if it was still
    there after ``wait`` seconds. ``digits``: decimals of those seconds in the "gone after" log line.
    """
    from mlops_platform.runtime import client as kclient
    from mlops_platform.runtime import resources

    log(f"deleting namespace {namespace}")
    try:
        await client.delete(resources.NAMESPACE, namespace, propagation_policy="Background")
    except kclient.ApiError as e:
        if e.not_found:
            return 0.0
        raise
    t0 = time.monotonic()
    while time.monotonic() - t0 < wait:
        try:
            await client.get(resources.NAMESPACE, namespace)
        except kclient.ApiError as e:
            if e.not_found:
                log(f"namespace {namespace} gone after {time.monotonic() - t0:.{digits}f} s")
                return time.monotonic() - t0
            raise
        await asyncio.sleep(poll)
    log(f"namespace {namespace} still terminating after {wait:.0f} s; not waiting longer")
    return None
