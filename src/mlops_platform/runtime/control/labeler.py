"""Bucket labels on the primary objects, so a sharded replica watches only its partitions' ones.

With sharding (:mod:`~mlops_platform.runtime.control.sharding`) a replica's primary informer is
narrowed server-side like the children's: ``mlops.platform/shard-bucket in (<its buckets>)``. Every
replica then lists, watches and decodes only the primary objects of the partitions it holds,
instead of every event of every object (with ``P = 3`` two thirds of what each replica decoded
were other replicas' status writes). A label selector cannot compute a hash, so the bucket must
be on the object: :class:`BucketLabeler` puts it there.

Contract (one labeler per sharded controller, per replica):

- **The hash is the truth, the label is a routing hint.** An object's partition is always
  :func:`~.partitioning.partition_of` its ``namespace/name`` (immutable for its lifetime); the label
  only decides which replica's watch sees it. So a missing or wrong label can delay an object
  (until it is labelled), never put it in two partitions or let two replicas reconcile it.
- **Missing labels** (objects created before sharding was turned on, by a client that does not
  set it): every replica watches the primary kind with ``!mlops.platform/shard-bucket`` (one
  LIST + WATCH, empty once everything is labelled; its store keeps only names and labels). The
  replica that holds an object's partition patches the label (a JSON merge patch of that one
  label, field manager ``mlops-platform-sharder``); the object then leaves the unlabelled watch
  and enters that replica's narrowed one. A partition acquired later is labelled then
  (:meth:`enqueue_all`, called by the coordinator like a controller's).
- **Wrong labels** (a user or a tool set another bucket): the object is in the narrowed cache of
  the replica holding the label's bucket, whose controller skips it (it does not own it by hash);
  its labeler patches the right bucket, and the object moves to its owner's watch.
- **Failures** retry with the controllers' per-item backoff; a deleted object is dropped. The
  patch carries no precondition: setting one label to a value that depends only on the name is
  idempotent, so two replicas patching at once (one listing a partition ahead) write the same.
- **Cost**: one write per object, once in its life (none for objects created already labelled),
  and on every replica one watch event for each object created unlabelled (two: it enters and
  leaves the unlabelled selection) instead of every event of every object for its lifetime.

Metrics: ``mlops_platform_shard_labels_patched_total`` (labels this replica wrote, by
``resource``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter

from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import informer as rinformer
from mlops_platform.runtime.control.controller import request_for
from mlops_platform.runtime.control.partitioning import BUCKET_LABEL, bucket_of
from mlops_platform.runtime.control.reconcile import InFlight, Request
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.queue import workqueue
from mlops_platform.runtime.queue.rate_limiting_queue import RateLimitingQueue
from mlops_platform.runtime.transport import client as rclient

__all__ = ["FIELD_MANAGER", "UNLABELLED", "BucketLabeler", "mislabelled"]

log = logging.getLogger("mlops_platform.runtime.control.labeler")

FIELD_MANAGER = "mlops-platform-sharder"
#: the selector of the primary objects no replica's narrowed watch sees
UNLABELLED = f"!{BUCKET_LABEL}"
Where = Callable[[Request], bool]


def mislabelled(obj: Obj) -> bool:
    """Whether ``obj`` lacks its bucket label or carries another bucket than its name's."""
    labels = objects.meta(obj).get("labels") or {}
    return labels.get(BUCKET_LABEL) != str(bucket_of(request_for(obj)))


def _names_only(obj: Obj) -> Obj:
    """What the unlabelled store keeps of an object: enough to name it and read its labels."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "labels", "resourceVersion", "uid") if k in meta}
    return {"metadata": kept}


class _Handler:
    def __init__(self, on_object: Callable[[Obj], None]) -> None:
        self._on_object = on_object

    def on_add(self, obj: Obj) -> None:
        self._on_object(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._on_object(new)

    def on_delete(self, obj: Obj) -> None:
        pass


_PATCHED: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()


def _counter(registry: CollectorRegistry) -> Counter:
    counter = _PATCHED.get(registry)
    if counter is None:
        counter = _PATCHED[registry] = Counter(
            "mlops_platform_shard_labels_patched",
            "Bucket labels this replica wrote on primary objects (missing or wrong ones)",
            ["resource"],
            registry=registry,
        )
    return counter


class BucketLabeler:
    """Gives the primary objects of ``resource`` their bucket label (see the module docstring).

    ``owns``: whether this replica reconciles a request now (the coordinator's
    :meth:`~.sharding.ShardCoordinator.owns`); ``primary``: the cache's (narrowed) informer of
    ``resource``, whose wrongly labelled objects this labeler corrects; ``label_selector``: the
    kind's own selector in that cache (objects outside it are not this controller's). A
    :class:`~.sharding.Target` of the coordinator.
    """

    def __init__(
        self,
        client: rclient.Client,
        resource: rclient.Resource,
        *,
        owns: Callable[[Request], bool],
        primary: rinformer.Informer,
        label_selector: str | None = None,
        workers: int = 2,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._client = client
        self.resource = resource
        self._owns = owns
        self._primary = primary
        self._workers = workers
        self.unlabelled = rinformer.Informer(
            client,
            resource,
            namespace=primary.namespace,
            label_selector=f"{label_selector},{UNLABELLED}" if label_selector else UNLABELLED,
            transform=_names_only,
        )
        self.queue: RateLimitingQueue[Request] = RateLimitingQueue(name=f"{resource.plural}-labels")
        self._in_flight = InFlight()
        self._tasks: list[asyncio.Task[None]] = []
        self._patched = _counter(registry if registry is not None else REGISTRY).labels(
            resource=resource.group_resource
        )
        self.unlabelled.add_event_handler(_Handler(self._on_unlabelled))
        primary.add_event_handler(_Handler(self._on_primary))

    # -- events ---------------------------------------------------------------------------------------

    def _on_unlabelled(self, obj: Obj) -> None:
        req = request_for(obj)
        if self._owns(req):
            self.queue.add(req)

    def _on_primary(self, obj: Obj) -> None:
        # in this replica's narrowed cache with another bucket than its name's: only the holder of
        # the label's bucket sees it, so that one corrects it, owner or not
        if mislabelled(obj):
            self.queue.add(request_for(obj))

    # -- the coordinator's Target ---------------------------------------------------------------------

    def enqueue_all(self, where: Where | None = None) -> None:
        """Queue the unlabelled objects this replica owns (``where`` accepts) and the mislabelled ones."""
        for obj in self.unlabelled.store.list():
            req = request_for(obj)
            if (where is None or where(req)) and self._owns(req):
                self.queue.add(req)
        for obj in self._primary.store.list():
            if mislabelled(obj):
                self.queue.add(request_for(obj))

    async def wait_idle(self, where: Where) -> None:
        """Wait until no label patch that ``where`` accepts is in flight."""
        await self._in_flight.wait_none(where)

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> None:
        self.unlabelled.start()
        for i in range(self._workers):
            name = f"{self.resource.plural}-labeler-{i}"
            self._tasks.append(asyncio.create_task(self._work(), name=name))

    async def stop(self) -> None:
        self.queue.shutdown()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        await self.unlabelled.stop()

    async def _work(self) -> None:
        while True:
            try:
                req = await self.queue.get()
            except workqueue.ShutDown:
                return
            self._in_flight.add(req)
            try:
                await self._label(req)
                self.queue.forget(req)
            except rclient.ApiError as e:
                if e.status == 404:
                    self.queue.forget(req)
                else:
                    self._retry(req, e)
            except Exception as e:  # a worker must outlive any one object: retried with backoff
                self._retry(req, e)
            finally:
                self._in_flight.discard(req)
                self.queue.done(req)

    def _retry(self, req: Request, error: Exception) -> None:
        log.warning(
            "could not label %s/%s with its shard bucket, retrying",
            req.namespace,
            req.name,
            extra={"resource": self.resource.group_resource, "error": repr(error)},
        )
        self.queue.add_rate_limited(req)

    async def _label(self, req: Request) -> None:
        unlabelled = self.unlabelled.store.get(req.namespace, req.name)
        if unlabelled is not None:
            if not self._owns(req):  # its partition moved while it was queued
                return
            obj: Obj = unlabelled
        else:
            cached = self._primary.store.get(req.namespace, req.name)
            if cached is None or not mislabelled(cached):
                return  # deleted, or labelled meanwhile
            obj = cached
        bucket = str(bucket_of(req))
        patch: dict[str, Any] = {"metadata": {"labels": {BUCKET_LABEL: bucket}}}
        await self._client.patch(
            self.resource, req.name, patch, namespace=req.namespace, field_manager=FIELD_MANAGER
        )
        self._patched.inc()
        log.debug(
            "shard bucket labelled",
            extra={
                "resource": self.resource.group_resource,
                "object": f"{req.namespace}/{req.name}" if req.namespace else req.name,
                "bucket": bucket,
                "was": (objects.meta(obj).get("labels") or {}).get(BUCKET_LABEL),
            },
        )
