"""Controllers: watch kinds, map events to requests, run a reconciler on N workers.

Declare one with the builder (:mod:`~mlops_platform.runtime.control.builder`: ``for_``, ``owns``,
``watches``, ``with_options``, ``build``).

Contract:
- ``for_`` enqueues the object itself; ``owns`` enqueues the controller owner (ownerReferences entry
  with ``controller: true`` of the ``for_`` kind) — on update both the old and the new owner;
  ``watches`` enqueues whatever the mapper returns. Predicates filter events before enqueueing.
- ``owns`` of an optional :class:`~mlops_platform.runtime.kinds.Kind` starts watching when the
  kind's CRD is established (:mod:`~mlops_platform.runtime.caching.crdwatch`), also long after start, and
  stops when it goes away; either way every object of the ``for_`` kind is enqueued (once the new
  informer has synced), so reconcilers see the kind appear and disappear without a restart.
- Each request is reconciled by at most one worker at a time; results and exceptions are handled as
  documented in :mod:`mlops_platform.runtime.control.reconcile`. One failing object never blocks others.
- ``ownership`` (default None: every request), set before :meth:`Controller.start`, makes a replica
  reconcile only the requests it accepts (:mod:`~mlops_platform.runtime.control.sharding`): events of
  others are not enqueued, and a dequeued request it no longer accepts is skipped, not reconciled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable

from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.caching import crdwatch, kinds
from mlops_platform.runtime.control import predicates as rpredicates
from mlops_platform.runtime.control.reconcile import InFlight, Reconciler, Request, Result, TerminalError
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.observability import logs
from mlops_platform.runtime.observability import metrics as rmetrics
from mlops_platform.runtime.queue import rate_limiting_queue, ratelimiter, workqueue
from mlops_platform.runtime.transport import client as rclient

log = logging.getLogger("mlops_platform.runtime.control.controller")
Mapper = Callable[[Obj], Iterable[Request]]
#: which requests this replica reconciles (e.g. ``ShardCoordinator.owns``)
Ownership = Callable[[Request], bool]


def request_for(obj: Obj) -> Request:
    meta = obj["metadata"]
    return Request(meta.get("namespace"), meta["name"])


def owner_mapper(owner: rclient.Resource) -> Mapper:
    """Map an object to its controller owner of kind ``owner`` (same namespace)."""

    def mapper(obj: Obj) -> Iterable[Request]:
        for ref in objects.owner_references(obj):
            if not ref.get("controller") or ref.get("kind") != owner.kind:
                continue
            if ref.get("apiVersion", "").rpartition("/")[0] == owner.group:
                return (Request(objects.namespace(obj) if owner.namespaced else None, ref["name"]),)
        return ()

    return mapper


@dataclasses.dataclass
class Watch:
    resource: rclient.Resource
    mapper: Mapper | None  # None: the object itself
    predicate: rpredicates.Predicate
    priority: int = workqueue.NORMAL  # of its change events (initial list and resyncs: LOW)


class _Handler:
    """Informer event handler: filter with the predicate, map, enqueue what the controller accepts,
    at low priority when the event is an informer's initial list or a resync (controller-runtime's
    priority queue), so that real changes go first."""

    def __init__(
        self,
        watch: Watch,
        queue: rate_limiting_queue.RateLimitingQueue[Request],
        owned: Ownership,
        synced: Callable[[], bool] = lambda: True,
    ) -> None:
        self._w, self._q, self._owned, self._synced = watch, queue, owned, synced

    def _enqueue(self, obj: Obj, priority: int) -> None:
        if self._w.mapper is None:
            reqs: Iterable[Request] = (request_for(obj),)
        else:
            reqs = self._w.mapper(obj)
        for req in reqs:
            if self._owned(req):
                self._q.add(req, priority)

    def on_add(self, obj: Obj) -> None:
        if self._w.predicate.create(obj):
            # before the informer has synced, an add is its initial list, not a change
            self._enqueue(obj, self._w.priority if self._synced() else workqueue.LOW)

    def on_update(self, old: Obj, new: Obj) -> None:
        if self._w.predicate.update(old, new):
            if old is new:  # a resync replays the cache
                self._enqueue(new, workqueue.LOW)
                return
            if self._w.mapper is not None:
                self._enqueue(old, self._w.priority)
            self._enqueue(new, self._w.priority)

    def on_delete(self, obj: Obj) -> None:
        if self._w.predicate.delete(obj):
            self._enqueue(obj, self._w.priority)


class Controller:
    """A work queue of :class:`Request` fed by the watches and drained by N workers running the
    reconciler: controller-runtime's ``controller.Controller`` (``pkg/internal/controller``).

    - ``queue`` ~ its ``TypedRateLimitingInterface`` (client-go work queue semantics);
    - :meth:`start` ~ ``Start(ctx)`` after the caches synced, starting ``MaxConcurrentReconciles``
      workers; :meth:`stop` ~ cancelling that context (in-flight reconciles drain first);
    - :meth:`follow` ~ ``Watch(source.Kind(...))`` after start, for kinds whose CRD comes and goes;
    - :meth:`enqueue_all` (every cached ``for_`` object) has no direct equivalent: a
      ``source.Channel`` of generic events would do it there;
    - ``ownership`` and :meth:`wait_idle` (sharding) have none either.

    Build one with :class:`~.builder.Builder`, not directly.
    """

    def __init__(
        self,
        name: str,
        cache: rcache.Cache,
        watches: list[Watch],
        reconciler: Reconciler,
        max_concurrent_reconciles: int,
        rate_limiter: ratelimiter.RateLimiter[Request] | None,
        metrics: rmetrics.Metrics | None,
    ) -> None:
        self.name = name
        self.cache = cache
        self.reconciler = reconciler
        self.max_concurrent_reconciles = max_concurrent_reconciles
        self.metrics = metrics or rmetrics.Metrics()
        qm = self.metrics.workqueue.new_queue_metrics(name, controller=name)
        self.queue: rate_limiting_queue.RateLimitingQueue[Request] = rate_limiting_queue.RateLimitingQueue(
            rate_limiter, name, metrics=qm
        )
        self._watches = watches
        self._optional: dict[kinds.Kind, rpredicates.Predicate] = {}
        self._waiting: dict[kinds.Kind, asyncio.Task[None]] = {}
        self._workers: list[asyncio.Task[None]] = []
        #: which requests this replica reconciles (None: all); see the module contract
        self.ownership: Ownership | None = None
        self._in_flight = InFlight()  # being reconciled by a worker now
        self.metrics.max_concurrent.labels(name).set(max_concurrent_reconciles)
        self.metrics.active_workers.labels(name).set(0)
        for result in ("success", "error", "requeue", "requeue_after"):
            self.metrics.reconcile_total.labels(name, result)
        self.metrics.reconcile_errors.labels(name)
        for w in self._watches:
            inf = self.cache.informer_for(w.resource)
            inf.add_event_handler(_Handler(w, self.queue, self.accepts, inf.has_synced))

    def follow(
        self, optional_kinds: crdwatch.OptionalKinds, owned: list[tuple[kinds.Kind, rpredicates.Predicate]]
    ) -> None:
        """Own optional kinds: watch each while its CRD is served (see the module contract)."""
        for kind, predicate in owned:
            optional_kinds.register(kind)
            self._optional[kind] = predicate
        optional_kinds.listen(self._kind_changed)

    def _kind_changed(
        self, kind: kinds.Kind, old: rclient.Resource | None, new: rclient.Resource | None
    ) -> None:
        predicate = self._optional.get(kind)
        if predicate is None:
            return
        pending = self._waiting.pop(kind, None)
        if pending is not None:  # the informer it waited for is gone
            pending.cancel()
        if new is None:
            self.enqueue_all()
            return
        informer = self.cache.informer_for(new, optional=True)
        watch = Watch(new, owner_mapper(self.primary), predicate)
        informer.add_event_handler(_Handler(watch, self.queue, self.accepts, informer.has_synced))

        async def after_sync() -> None:
            await informer.wait_for_sync()
            self.enqueue_all()

        task = asyncio.get_running_loop().create_task(after_sync(), name=f"{self.name}: {kind.kind} sync")
        self._waiting[kind] = task
        task.add_done_callback(
            lambda t: self._waiting.pop(kind, None) if self._waiting.get(kind) is t else None
        )

    def enqueue_all(self, where: Ownership | None = None) -> None:
        """Enqueue every cached object of the ``for_`` kind that ``where`` and :meth:`accepts` accept."""
        for obj in self.cache.list(self.primary):
            req = request_for(obj)
            if (where is None or where(req)) and self.accepts(req):
                self.queue.add(req)

    def accepts(self, req: Request) -> bool:
        """Whether this replica reconciles ``req`` (``ownership`` accepts it, or there is none)."""
        return self.ownership is None or self.ownership(req)

    async def wait_idle(self, where: Ownership) -> None:
        """Wait until no request that ``where`` accepts is being reconciled."""
        await self._in_flight.wait_none(where)

    @property
    def primary(self) -> rclient.Resource:
        """The ``for_`` kind."""
        return self._watches[0].resource

    @property
    def resources(self) -> list[rclient.Resource]:
        return [w.resource for w in self._watches]

    def start(self) -> None:
        """Start the workers (call after the cache has synced)."""
        for i in range(self.max_concurrent_reconciles):
            self._workers.append(asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}"))

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop taking work, let in-flight reconciles finish (bounded by ``timeout``), stop workers."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.queue.shutdown_with_drain(), timeout)
        self.queue.shutdown()
        tasks = [*self._workers, *self._waiting.values()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._workers.clear()

    async def _worker(self) -> None:
        while True:
            # a reconcile that decides from the cache alone never awaits: without this yield a
            # worker would run a whole backlog (5,000 initial reconciles) without letting the loop
            # read the watches, and a user's change (high priority) could not even be queued
            await asyncio.sleep(0)
            try:
                req = await self.queue.get()
            except workqueue.ShutDown:
                return
            if not self.accepts(req):  # its partition moved to another replica since it was queued
                self.queue.forget(req)
                self.queue.done(req)
                with logs.log_context(controller=self.name, namespace=req.namespace, name=req.name):
                    log.debug("skipped: not owned by this replica")
                continue
            self._in_flight.add(req)
            try:
                with logs.log_context(
                    controller=self.name,
                    namespace=req.namespace,
                    name=req.name,
                    reconcile_id=uuid.uuid4().hex[:12],
                ):
                    await self._process(req)
            except Exception:  # never let a bug in bookkeeping kill the worker
                log.exception("controller worker error")
                self.queue.add_rate_limited(req)
            finally:
                self._in_flight.discard(req)
                self.queue.done(req)

    async def _process(self, req: Request) -> None:
        m, name = self.metrics, self.name
        m.active_workers.labels(name).inc()
        started = time.perf_counter()
        try:
            result = await self.reconciler.reconcile(req)
        except TerminalError as e:
            self.queue.forget(req)
            m.reconcile_total.labels(name, "error").inc()
            m.reconcile_errors.labels(name).inc()
            m.terminal_errors.labels(name).inc()
            log.error("reconcile failed permanently (not retried)", extra={"error": str(e)})
            return
        except Exception as e:
            self.queue.add_rate_limited(req)
            m.reconcile_total.labels(name, "error").inc()
            m.reconcile_errors.labels(name).inc()
            log.error(
                "reconcile failed, will retry",
                extra={"error": f"{type(e).__name__}: {e}", "requeues": self.queue.num_requeues(req)},
                exc_info=not isinstance(e, rclient.ApiError),
            )
            return
        finally:
            m.reconcile_time.labels(name).observe(time.perf_counter() - started)
            m.active_workers.labels(name).dec()
        if result is None:
            result = Result()
        if result.requeue_after is not None and result.requeue_after > 0:
            self.queue.forget(req)
            self.queue.add_after(req, result.requeue_after)
            outcome = "requeue_after"
        elif result.requeue:
            self.queue.add_rate_limited(req)
            outcome = "requeue"
        else:
            self.queue.forget(req)
            outcome = "success"
        m.reconcile_total.labels(name, outcome).inc()
        log.debug("reconcile done", extra={"result": outcome})
