"""Does a live object already carry what we would apply? (semantic subset comparison).

``differences(desired, live)`` lists the paths where ``live`` does not carry a value of ``desired``:
- maps: every key of ``desired`` must be in ``live`` and match; extra keys in ``live`` (server
  defaults, fields of other managers) are fine;
- lists: same length, element by element;
- an empty map/list in ``desired`` matches an absent one (the API server drops empties);
- Kubernetes quantities compare by value (``0.5`` == ``500m``, ``1Gi`` == ``1024Mi``) under
  ``resources``/``capacity``-like keys, and ints compare equal to their decimal strings there.

It cannot see a field we stopped setting (subset semantics), so callers also compare a hash of the
desired object (see :func:`desired_hash`).
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import msgspec

from mlops_platform.runtime import quantity

_QUANTITY_PARENTS = frozenset({"requests", "limits", "capacity", "allocatable", "hard", "used"})


def _is_empty(v: Any) -> bool:
    return v is None or v == {} or v == []


Path = tuple[str | int, ...]


def differences(desired: Any, live: Any) -> list[str]:
    """Paths (``spec.template.spec.containers[0].image``) where ``live`` lacks ``desired``'s value."""
    return [format_path(p) for p in difference_paths(desired, live)]


def format_path(path: Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "."


def difference_paths(desired: Any, live: Any, path: Path = (), parent_key: str = "") -> list[Path]:
    """Like :func:`differences`, with paths as tuples of keys and list indexes."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return [] if _is_empty(desired) and _is_empty(live) else [path]
        out: list[Path] = []
        for k, v in desired.items():
            sub = (*path, k)
            if k not in live:
                if not _is_empty(v):
                    out.append(sub)
                continue
            if parent_key in _QUANTITY_PARENTS and not isinstance(v, dict | list):
                if not _same_quantity(v, live[k]):
                    out.append(sub)
                continue
            out.extend(difference_paths(v, live[k], sub, k))
        return out
    if isinstance(desired, list):
        if not isinstance(live, list):
            return [] if _is_empty(desired) and _is_empty(live) else [path]
        if len(desired) != len(live):
            return [path]
        out = []
        for i, (d, lv) in enumerate(zip(desired, live, strict=True)):
            out.extend(difference_paths(d, lv, (*path, i), parent_key))
        return out
    return [] if desired == live else [path]


def overwrite(live: dict[str, Any], desired: dict[str, Any], paths: list[Path]) -> dict[str, Any]:
    """A copy of ``live`` where each differing path takes ``desired``'s value; a difference inside a
    list replaces the whole list (entries other managers added are dropped)."""
    out = copy.deepcopy(live)
    for path in paths:
        cut = next((i for i, part in enumerate(path) if isinstance(part, int)), len(path))
        keys = [str(k) for k in path[:cut]]
        if not keys:
            continue
        src: Any = desired
        for k in keys:
            src = src[k]
        dst = out
        for k in keys[:-1]:
            dst = dst.setdefault(k, {})
        dst[keys[-1]] = src
    return out


def _same_quantity(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:
        return quantity.parse(a) == quantity.parse(b)
    except ValueError:
        return False


def desired_hash(obj: dict[str, Any]) -> str:
    """A short stable hash of an object (keys sorted), for "did what we want change?" checks."""
    return hashlib.sha256(msgspec.json.encode(obj, order="sorted")).hexdigest()[:16]
