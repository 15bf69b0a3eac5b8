"""Locate files shipped inside pinned upstream Go modules (CRDs, kwok stages)."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path

from mlops_platform.devcluster import binaries


@functools.cache
def module_dir(pin_dir: str, module: str) -> Path:
    """The extracted source of ``module`` at the version pinned by ``hack/<pin_dir>/go.mod``.

    Runs ``go mod download -json MODULE`` there, which verifies the download against ``go.sum``
    and is a no-op when the module cache already holds it.
    """
    root = binaries.repo_root()
    if root is None:
        raise FileNotFoundError("upstream manifests need a source checkout (hack/ is not installed)")
    out = subprocess.run(
        ["go", "mod", "download", "-json", module],
        cwd=root / "hack" / pin_dir,
        capture_output=True,
        text=True,
        check=False,
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"go mod download {module} failed: {info.get('Error') or out.stderr.strip()}")
    return Path(info["Dir"])
