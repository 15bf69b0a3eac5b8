"""The storage initializer as a real process (``python -m mlops_platform.storage fetch ...``), for
tests: its exit code, stderr (JSON log lines and the failure line) and termination log.

The child's environment has none of this machine's cloud settings (``AWS_*``, ``GOOGLE_*``,
``GCE_*``): the credentials a test means are the only ones it sees (``env`` adds some back).
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import os
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["Run", "credentials_dir", "fetch", "files", "tar"]

_CLOUD_ENV = ("AWS_", "GOOGLE_", "GCE_", "CLOUDSDK_")


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of the initializer."""

    code: int
    stderr: str
    termination: str
    #: what it printed on stdout (nothing: its log is on stderr)
    stdout: str = ""

    def logs(self) -> list[dict[str, Any]]:
        """The JSON log lines of stderr."""
        return [json.loads(line) for line in self.stderr.splitlines() if line.startswith("{")]

    @property
    def failure_line(self) -> str:
        """The termination log's one line (without its newline); empty after a success."""
        return self.termination.rstrip("\n")


async def fetch(
    uri: str,
    dest: Path,
    *args: str,
    termination_log: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 300.0,
) -> Run:
    """Run ``fetch uri dest *args`` to its end (killed after ``timeout`` seconds)."""
    await asyncio.to_thread(termination_log.unlink, missing_ok=True)
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(_CLOUD_ENV)}
    child_env.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mlops_platform.storage",
        "fetch",
        uri,
        str(dest),
        *args,
        "--termination-log",
        str(termination_log),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=child_env,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    text = await asyncio.to_thread(_read_if_any, termination_log)
    return Run(proc.returncode if proc.returncode is not None else -1, err.decode(), text, out.decode())


def _read_if_any(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def credentials_dir(path: Path, values: Mapping[str, str]) -> Path:
    """A mounted-Secret-like directory at ``path``: one file per key (values end in a newline, as
    ``echo`` writes them)."""
    path.mkdir(parents=True, exist_ok=True)
    for key, value in values.items():
        (path / key).write_text(value + "\n")
    return path


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative POSIX path -> contents)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def tar(members: Mapping[str, bytes], *, gzip: bool = True) -> bytes:
    """A tar archive (gzipped unless ``gzip`` is False) of ``members`` (name -> bytes), names as
    given: a test may pass unsafe ones (``../escape``)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gzip else "w") as archive:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
    return buf.getvalue()
