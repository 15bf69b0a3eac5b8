"""Committed generated files: render them as deterministic YAML, ``--write`` them or ``--check`` them.

Contract:
- ``files`` maps a path relative to ``root`` (an absolute path stays as it is) to its content.
- ``owned_dirs`` are directories (relative to ``root``) whose every ``*.yaml`` is generated: one
  that the generator no longer produces is *stale*; :func:`write` removes it, :func:`check` reports it.
- :func:`check` returns the unified diff (committed -> generated) of every file that differs or is
  missing, then a ``stale generated file: <path>`` line per stale file; ``""`` means up to date.
- :func:`run` is the ``--write`` / ``--check`` of a generator's CLI: ``--check`` prints the report
  and a hint to stderr and returns 1 when something is out of date.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import yaml

__all__ = ["add_mode_arguments", "check", "checkout_root", "dump", "run", "stale", "write"]


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: object) -> bool:
        return True  # a dict shared by two fields is written twice, never as &id001/*id001


def dump(docs: Sequence[object], *, sort_keys: bool = False) -> str:
    """Deterministic multi-document YAML (insertion or sorted key order, no aliases, no line folding)."""
    return yaml.dump_all(list(docs), Dumper=_Dumper, sort_keys=sort_keys, width=4096, allow_unicode=True)


def stale(root: Path, files: Mapping[Path, str], owned_dirs: Iterable[Path] = ()) -> list[Path]:
    """The ``*.yaml`` under ``owned_dirs`` that are not in ``files`` (relative to ``root``)."""
    return sorted(
        p.relative_to(root)
        for d in owned_dirs
        for p in (root / d).glob("*.yaml")
        if p.relative_to(root) not in files
    )


def check(root: Path, files: Mapping[Path, str], owned_dirs: Iterable[Path] = ()) -> str:
    """The unified diff of every out-of-date file and the stale files; ``""`` when all are current."""
    report: list[str] = []
    for rel, text in files.items():
        path = root / rel
        committed = path.read_text() if path.is_file() else ""
        if committed != text:
            report += difflib.unified_diff(
                committed.splitlines(keepends=True), text.splitlines(keepends=True), str(rel), "generated"
            )
    report += [f"stale generated file: {p}\n" for p in stale(root, files, owned_dirs)]
    return "".join(report)


def write(root: Path, files: Mapping[Path, str], owned_dirs: Iterable[Path] = ()) -> None:
    """Write every file (creating directories) and remove the stale ones."""
    for rel in stale(root, files, owned_dirs):
        (root / rel).unlink()
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def add_mode_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """The mutually exclusive ``--write`` and ``--check`` flags (neither: the caller prints)."""
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {what}")
    mode.add_argument(
        "--check", action="store_true", help=f"exit 1 with a diff when {what} is not up to date"
    )


def run(
    args: argparse.Namespace,
    root: Path,
    files: Mapping[Path, str],
    *,
    command: str,
    owned_dirs: Iterable[Path] = (),
) -> int:
    """``--write`` (0), or ``--check``: 0 when up to date, else print the report, hint ``command``, 1."""
    if args.write:
        write(root, files, owned_dirs)
        return 0
    report = check(root, files, owned_dirs)
    if not report:
        return 0
    sys.stdout.write(report)
    print(f"generated files are out of date: run `{command} --write`", file=sys.stderr)
    return 1


def checkout_root(flag: str) -> Path:
    """The source checkout this package runs from (else exit, asking for ``flag``)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "pyproject.toml").is_file():
        raise SystemExit(f"not running from a source checkout: pass {flag}")
    return root
