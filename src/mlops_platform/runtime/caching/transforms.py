"""Transforms an informer (:mod:`~mlops_platform.runtime.caching.informer`) runs on every object
before it is stored: what a cached object keeps, and how little memory it takes.

Contract: a transform takes an object and returns the one to store (it may change its argument in
place and return it); it runs on the informer's task, once per listed or watched object, so it must
be quick. :func:`compact`, the default, drops ``metadata.managedFields`` and shares equal short
strings (:func:`intern_strings`); neither changes what a reader sees.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from mlops_platform.runtime.objects import Obj

__all__ = ["INTERN_MAX", "Transform", "compact", "intern_strings", "strip_managed_fields"]

Transform = Callable[[Obj], Obj]


def strip_managed_fields(obj: Obj) -> Obj:
    """managedFields are large and no controller reads them."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


#: strings up to this length are shared between cached objects (names, labels, images, enums)
INTERN_MAX = 64
_intern = sys.intern


def intern_strings(node: Any) -> Any:
    """Share equal short strings between cached objects, in place (``sys.intern``).

    Thousands of Deployments carry the same label keys and values, images, port names, probe paths
    and enum values ("IfNotPresent", "TCP"), each decoded into a string object of its own; sharing
    them takes a third off a cached Deployment (28.5 -> 19.2 KiB, ``docs/measurements.md``) for
    some 50 us of CPU per object. Keys are shared already (msgspec's key cache)."""
    items = node.items() if type(node) is dict else enumerate(node) if type(node) is list else ()
    for k, v in items:
        t = type(v)
        if t is str:
            if len(v) <= INTERN_MAX:
                node[k] = _intern(v)
        elif t is dict or t is list:
            intern_strings(v)
    return node


def compact(obj: Obj) -> Obj:
    """The default transform: managedFields dropped (:func:`strip_managed_fields`), equal short
    strings shared (:func:`intern_strings`)."""
    return intern_strings(strip_managed_fields(obj))  # type: ignore[no-any-return]
