"""Optional kinds, followed live: start a kind's informer when its CRD is established, stop it when
the CRD goes away (kopf's CRD observer; controller-runtime's ``Controller.Watch`` after start).

Contract:
- :meth:`OptionalKinds.register` a :class:`~mlops_platform.runtime.kinds.Kind` with
  ``optional=True`` before the cache starts. The first registration makes the cache watch
  CustomResourceDefinitions (one LIST, then one watch stream, objects slimmed to what version
  resolution reads); nothing else is requested for a kind while its CRD is absent.
- When the CRD of a registered kind is Established and serves a version the kind speaks,
  :meth:`resolve` returns that version's :class:`Resource` and an ``optional`` informer for it is
  running (it never counts for the cache's sync or readiness). Listeners are called with
  ``(kind, old, new)`` on every change, synchronously on the CRD informer's task, after the new
  informer exists and before it delivers anything (so a listener can add its handler first).
- When the CRD is deleted, stops being established or stops serving our versions, the informer is
  detached at once and stopped in the background, and listeners get ``new=None``.
- Non-optional kinds resolve statically to their first version.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from mlops_platform.runtime import objects, rbac
from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

log = logging.getLogger("mlops_platform.runtime.caching.crdwatch")
Listener = Callable[[kinds.Kind, rclient.Resource | None, rclient.Resource | None], None]

RBAC = rbac.requires(
    "apiextensions.k8s.io",
    "customresourcedefinitions",
    ["list", "watch"],
    scope="cluster",
    why="optional kinds: follow their CRDs being installed and removed",
)


class OptionalKinds:
    def __init__(self, cache: rcache.Cache) -> None:
        self.cache = cache
        self._by_crd: dict[str, kinds.Kind] = {}
        self._resolved: dict[kinds.Kind, rclient.Resource] = {}
        self._listeners: list[Listener] = []
        self._stopping: set[asyncio.Task[None]] = set()

    def register(self, kind: kinds.Kind) -> None:
        """Follow ``kind``'s CRD (idempotent; non-optional kinds need no registration)."""
        if not kind.optional:
            return
        known = self._by_crd.get(kind.crd_name)
        if known is not None and known != kind:
            raise ValueError(f"{kind.crd_name} registered twice with different versions")
        if not self._by_crd:
            self.cache.transform(resources.CRD, kinds.slim_crd)
            self.cache.informer_for(resources.CRD).add_event_handler(self)
        self._by_crd[kind.crd_name] = kind

    def listen(self, fn: Listener) -> None:
        self._listeners.append(fn)

    @property
    def registered(self) -> list[kinds.Kind]:
        return list(self._by_crd.values())

    def resolve(self, kind: kinds.Kind) -> rclient.Resource | None:
        """The resource to use for ``kind`` now; None while an optional kind is not served."""
        if not kind.optional:
            return kind.resource()
        return self._resolved.get(kind)

    def synced(self, kind: kinds.Kind) -> bool:
        """The kind is served and its informer has stored its first LIST (reads are complete)."""
        res = self.resolve(kind)
        return res is not None and self.cache.synced(res)

    def all_synced(self) -> bool:
        """Every served registered kind's informer has stored its first LIST. Not part of readiness
        (an optional informer may wait long for a CRD the API server has just begun to serve); what
        a test waits on before it measures an operator that has seen every kind it will write."""
        return all(self.cache.synced(res) for res in self._resolved.values())

    async def stop(self) -> None:
        """Wait for informers of removed kinds to finish stopping."""
        for task in list(self._stopping):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- CRD events (informer handler) ----------------------------------------------------------

    def on_add(self, obj: Obj) -> None:
        self._observe(obj, deleted=False)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._observe(new, deleted=False)

    def on_delete(self, obj: Obj) -> None:
        self._observe(obj, deleted=True)

    def _observe(self, crd: Obj, *, deleted: bool) -> None:
        kind = self._by_crd.get(objects.name(crd))
        if kind is None:
            return
        version = None if deleted else kinds.served_version(kind, crd)
        new = kind.resource(version) if version else None
        old = self._resolved.get(kind)
        if new == old:
            return
        if old is not None:
            informer = self.cache.detach_informer(old)
            if informer is not None:
                task = asyncio.get_running_loop().create_task(informer.stop())
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
        if new is None:
            self._resolved.pop(kind, None)
        else:
            self._resolved[kind] = new
            self.cache.informer_for(new, optional=True)
        log.info(
            "optional kind available" if new else "optional kind gone",
            extra={"kind": kind.group_kind, "version": new.version if new else None},
        )
        for fn in self._listeners:
            try:
                fn(kind, old, new)
            except Exception:
                log.exception("optional kind listener failed", extra={"kind": kind.group_kind})
