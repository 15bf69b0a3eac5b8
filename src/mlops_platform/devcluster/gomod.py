"""Locate files shipped inside pinned upstream Go modules (CRDs, kwok stages)."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

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


class _ManifestLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a plain ``=`` is the string ``"="``, as Kubernetes' YAML parser reads
    it (PyYAML reads it as YAML 1.1's ``value`` tag and cannot build it; the Prometheus Operator's
    CRDs list it in an enum)."""


def _plain(loader: _ManifestLoader, node: yaml.Node) -> str:
    assert isinstance(node, yaml.ScalarNode)
    return str(loader.construct_scalar(node))


_ManifestLoader.add_constructor("tag:yaml.org,2002:value", _plain)


def documents(pin_dir: str, module: str, rel: str) -> list[dict[str, Any]]:
    """The YAML documents (not empty) of the file ``rel`` in ``module`` as ``hack/<pin_dir>`` pins it."""
    return parse((module_dir(pin_dir, module) / rel).read_text())


def parse(text: str) -> list[dict[str, Any]]:
    """The YAML documents (not empty) of upstream manifests ``text`` (a plain ``=`` as a string)."""
    return [d for d in yaml.load_all(text, Loader=_ManifestLoader) if d]
