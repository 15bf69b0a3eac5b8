"""Event filters (controller-runtime ``pkg/predicate``): which changes enqueue a reconcile.

A predicate sees create, update (old, new) and delete events and returns whether to
enqueue. Combine with :func:`all_of` / :func:`any_of`; the builder ANDs the predicates it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlops_platform.runtime.objects import Obj


class Predicate:
    """Accept everything; subclass or use :func:`from_update` to filter."""

    def create(self, obj: Obj) -> bool:
        return True

    def update(self, old: Obj, new: Obj) -> bool:
        return True

    def delete(self, obj: Obj) -> bool:
        return True


class _UpdateOnly(Predicate):
    def __init__(self, fn: Callable[[Obj, Obj], bool]) -> None:
        self._fn = fn

    def update(self, old: Obj, new: Obj) -> bool:
        return self._fn(old, new)


def from_update(fn: Callable[[Obj, Obj], bool]) -> Predicate:
    """A predicate that filters updates with ``fn(old, new)`` and passes create/delete."""
    return _UpdateOnly(fn)


def _meta(obj: Obj, field: str) -> Any:
    return (obj.get("metadata") or {}).get(field)


def generation_changed() -> Predicate:
    """Updates pass only when ``metadata.generation`` changed (spec edits, not status writes).

    Resyncs (old is new) pass too, so periodic resync still reaches the reconciler.
    """
    return from_update(lambda old, new: old is new or _meta(old, "generation") != _meta(new, "generation"))


def labels_changed() -> Predicate:
    return from_update(
        lambda old, new: old is new or (_meta(old, "labels") or {}) != (_meta(new, "labels") or {})
    )


def annotations_changed() -> Predicate:
    return from_update(
        lambda old, new: old is new or (_meta(old, "annotations") or {}) != (_meta(new, "annotations") or {})
    )


def resource_version_changed() -> Predicate:
    return from_update(lambda old, new: _meta(old, "resourceVersion") != _meta(new, "resourceVersion"))


class _Projection(Predicate):
    def __init__(self, fn: Callable[[Obj], Any]) -> None:
        self._fn = fn

    def create(self, obj: Obj) -> bool:
        return self._fn(obj) is not None

    def update(self, old: Obj, new: Obj) -> bool:
        return old is new or self._fn(old) != self._fn(new)

    def delete(self, obj: Obj) -> bool:
        return self._fn(obj) is not None


def projection_changed(fn: Callable[[Obj], Any]) -> Predicate:
    """For a watch the reconciler reads only ``fn(obj)`` of (a pod's failure, say), where ``None``
    means "nothing to report": an update passes when the projection changed, a create or delete when
    the object contributes something (``fn(obj) is not None``); resyncs (old is new) pass. Exact when
    the reconciler reads nothing else of these objects."""
    return _Projection(fn)


class _Combined(Predicate):
    def __init__(self, preds: tuple[Predicate, ...], combine: Callable[[Any], bool]) -> None:
        self._preds, self._combine = preds, combine

    def create(self, obj: Obj) -> bool:
        return self._combine(p.create(obj) for p in self._preds)

    def update(self, old: Obj, new: Obj) -> bool:
        return self._combine(p.update(old, new) for p in self._preds)

    def delete(self, obj: Obj) -> bool:
        return self._combine(p.delete(obj) for p in self._preds)


def all_of(*preds: Predicate) -> Predicate:
    """Every predicate must pass (none: accept everything; one: that predicate, unwrapped)."""
    if len(preds) <= 1:
        return preds[0] if preds else Predicate()
    return _Combined(preds, all)


def any_of(*preds: Predicate) -> Predicate:
    return _Combined(preds, any)
