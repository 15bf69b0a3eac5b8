"""The real Helm on a chart directory, for tests: the pinned binary of the tool cache
(:func:`mlops_platform.devcluster.binaries.helm`, built when missing).

::

    objs = helmchart.template(chart)                                   # the parsed documents, CRDs included
    objs = helmchart.template(chart, {"webhook": {"certManager": {"enabled": True}}, "replicas": 3})
    helmchart.lint(chart)                                              # `helm lint --strict`
    helmchart.run("install", "mlops-platform", str(chart), values=..., env=...)   # any other command

``values`` are nested like values.yaml and written to a temporary file passed with ``--values``, so
Helm merges them into the chart's defaults as it merges a user's file: maps are merged key by key
(a ``None`` value deletes a default key), lists and scalars replace. A failing command raises
:class:`HelmError` with Helm's stderr (and stdout, where ``helm lint`` writes its findings).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from mlops_platform.devcluster import binaries

Obj = dict[str, Any]


class HelmError(RuntimeError):
    """A helm command exited non-zero; the message has its arguments, exit code, stderr and stdout."""

    def __init__(self, command: list[str], returncode: int, stdout: str, stderr: str) -> None:
        self.command = command
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        out = f"\nstdout:\n{stdout.strip()}" if stdout.strip() else ""
        super().__init__(f"helm {' '.join(command)} failed (exit {returncode}):\n{stderr.strip()}{out}")


def run(*args: str, values: Mapping[str, object] | None = None, env: Mapping[str, str] | None = None) -> str:
    """``helm <args>`` (plus ``--values <file of values>`` when given), its stdout; ``env``: the
    process's whole environment (default: this one's). Raises :class:`HelmError`."""
    argv = list(args)
    with tempfile.TemporaryDirectory(prefix="helm-values-") as tmp:
        if values is not None:
            path = Path(tmp) / "values.json"  # JSON is YAML: the values' types exactly as given
            path.write_text(json.dumps(values))
            argv += ["--values", str(path)]
        proc = subprocess.run(
            [str(binaries.helm()), *argv],
            capture_output=True,
            text=True,
            check=False,
            env=None if env is None else dict(env),
        )
    if proc.returncode != 0:
        raise HelmError(argv, proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout


def template(
    chart: Path,
    values: Mapping[str, object] | None = None,
    *,
    release: str = "mlops-platform",
    namespace: str = "default",
) -> list[Obj]:
    """``helm template <release> <chart> --include-crds --namespace <namespace>``: the rendered
    documents, parsed (empty ones, e.g. a template its condition left out, dropped)."""
    out = run("template", release, str(chart), "--include-crds", "--namespace", namespace, values=values)
    return [d for d in yaml.safe_load_all(out) if d]


def lint(chart: Path, values: Mapping[str, object] | None = None) -> str:
    """``helm lint --strict <chart>`` (warnings fail too): its report. Raises :class:`HelmError`."""
    return run("lint", "--strict", str(chart), values=values)
