"""Small typed views over Kubernetes objects held as plain dicts (kopf's ``Body.meta`` idea).

The cache and the client hand out plain ``dict`` objects (no model decoding on the hot path). These
helpers are the one way to read their common parts, so a missing ``metadata`` or ``status`` never
raises and every module reads them the same way:

- :func:`meta`, :func:`name`, :func:`namespace`, :func:`uid`, :func:`labels`, :func:`annotations`,
  :func:`generation`, :func:`owner_references`, :func:`controller_ref`, :func:`deleting` (the
  store's key of an object is ``store.key_of``);
- :func:`condition` / :func:`condition_is` (``status.conditions`` entry by type, e.g. a
  Deployment's ``Progressing`` or a CRD's ``Established``).

``Obj`` is the one alias for such an object (``dict[str, Any]``).
"""

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]


def meta(obj: Mapping[str, Any]) -> Obj:
    """``metadata`` (an empty dict when absent)."""
    return obj.get("metadata") or {}


def name(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name") or "")


def namespace(obj: Mapping[str, Any]) -> str | None:
    """The namespace, or None for a cluster-scoped object."""
    ns = meta(obj).get("namespace")
    return str(ns) if ns else None


def uid(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("uid") or "")


def older(obj: Mapping[str, Any], than: Mapping[str, Any]) -> bool | None:
    """Whether ``obj`` is an older version of an object than ``than``, by resourceVersion: since
    KEP-5504 (Comparable Resource Version, GA in Kubernetes 1.35) the resourceVersions of one
    resource are decimal integers in the order of the writes. None when either is not one (another
    storage): then only equality says anything."""
    a, b = str(meta(obj).get("resourceVersion") or ""), str(meta(than).get("resourceVersion") or "")
    if not (a.isdigit() and b.isdigit()):
        return None
    return int(a) < int(b)


def generation(obj: Mapping[str, Any]) -> int:
    return int(meta(obj).get("generation") or 0)


def labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return meta(obj).get("annotations") or {}


def owner_references(obj: Mapping[str, Any]) -> list[Obj]:
    return list(meta(obj).get("ownerReferences") or ())


def controller_ref(obj: Mapping[str, Any]) -> Obj | None:
    """The ownerReferences entry with ``controller: true`` (at most one exists), or None."""
    return next((dict(r) for r in owner_references(obj) if r.get("controller")), None)


def deleting(obj: Mapping[str, Any]) -> bool:
    """The object has a deletionTimestamp (finalizers may still hold it)."""
    return bool(meta(obj).get("deletionTimestamp"))


def condition(obj: Mapping[str, Any] | None, type_: str) -> Obj | None:
    """A copy of the ``status.conditions`` entry of ``type_``, or None."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return None


def condition_is(obj: Mapping[str, Any] | None, type_: str, status: str = "True") -> bool:
    """Whether the condition ``type_`` exists with ``status``."""
    cond = condition(obj, type_)
    return cond is not None and cond.get("status") == status
