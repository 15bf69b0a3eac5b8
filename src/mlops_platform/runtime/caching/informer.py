"""Reflector + informer: keep a :class:`~mlops_platform.runtime.store.Store` equal to the server's truth.

Contract (client-go ``tools/cache`` reflector and shared informer semantics):
- Start with a paged LIST (``limit``/``continue``), replace the store with it (objects gone from the
  server are delivered as deletes), then WATCH from the list's ``resourceVersion`` with
  ``allowWatchBookmarks=true`` and a randomised server timeout (``min_watch_timeout`` .. 2x).
- Bookmarks only advance the resourceVersion. A watch that ends normally is restarted from the last
  resourceVersion seen. ``410 Gone`` / "Expired" (e.g. after etcd compaction) forces a re-list.
- Connection errors and 5xx back off exponentially from 0.8 s to 30 s with jitter
  (:class:`~mlops_platform.runtime.ratelimiter.Backoff`); the backoff resets after 120 s without a
  failure. ``429`` waits for the server's Retry-After. ``404`` (the resource is not served: a CRD
  just established takes the API server a moment to serve) is retried every
  :data:`NOT_FOUND_RETRY` seconds, never backed off further: an optional kind's informer starts
  when its CRD is established, and its first objects must not wait behind a grown backoff.
  Every wait is on the injectable ``clock``; :attr:`Informer.failures` counts the failed attempts.
- Handlers run synchronously on the informer's task in event order; a handler that raises is logged
  and does not stop delivery. Handlers must be quick (typically: enqueue a key).
- Every ``resync_period`` (default 10 h, jittered by up to 10 %) every cached object is re-delivered
  as an update (old is new) without contacting the server.
- ``transform`` runs on every object before it is stored (default: :func:`~.transforms.compact`:
  ``metadata.managedFields`` dropped, short strings shared).
  ``shape`` (:mod:`~mlops_platform.runtime.transport.shape`) has LIST pages and watch events
  decoded into the fields it keeps, before the transform: what it leaves out is never built.
- ``has_synced()`` is true once the first LIST has been stored.
- :meth:`Informer.reselect` changes the label selector while running: the watch ends, a LIST with
  the new selector replaces the store (objects no longer selected are delivered as deletes, newly
  selected ones as adds) and the watch resumes; it returns once that LIST is stored. A sharded
  replica narrows its informers to the partitions it holds this way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Iterable
from typing import Protocol

from mlops_platform.runtime import background
from mlops_platform.runtime.caching import store as rstore
from mlops_platform.runtime.caching import transforms
from mlops_platform.runtime.clock import Clock, RealClock
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.queue import ratelimiter
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import codec
from mlops_platform.runtime.transport import shape as rshape

log = logging.getLogger("mlops_platform.runtime.caching.informer")
#: list/watch failures: 0.8 s doubling to 30 s, plus up to 100 % jitter; reset after 120 s healthy
BACKOFF_INITIAL, BACKOFF_CAP, BACKOFF_JITTER, BACKOFF_RESET = 0.8, 30.0, 1.0, 120.0
#: a LIST/WATCH answered 404 (the kind is not served, yet) is retried this often, without backoff
NOT_FOUND_RETRY = 1.0


#: called with the old and the new :attr:`Informer.last_error` when it changes kind
ErrorListener = Callable[[Exception | None, Exception | None], None]


class EventHandler(Protocol):
    def on_add(self, obj: Obj) -> None: ...
    def on_update(self, old: Obj, new: Obj) -> None: ...
    def on_delete(self, obj: Obj) -> None: ...


class Informer:
    """List-watch one resource (optionally one namespace / selector) into a store and notify handlers."""

    def __init__(
        self,
        client: rclient.Client,
        resource: rclient.Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resync_period: float = 10 * 3600.0,
        transform: transforms.Transform | None = transforms.compact,
        shape: rshape.Shape | None = None,
        page_size: int = 500,
        min_watch_timeout: float = 300.0,
        indexers: dict[str, rstore.IndexFunc] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.clock: Clock = clock if clock is not None else RealClock()
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.shape = shape
        self.resync_period = resync_period
        self.transform = transform
        self.page_size = page_size
        self.min_watch_timeout = min_watch_timeout
        self.store = rstore.Store(indexers)
        self.handlers: list[EventHandler] = []
        self.last_resource_version: str | None = None
        self.relists = 0  # how many times the reflector had to LIST (1 = only the initial list)
        #: the last list/watch error (None once listing/watching works again): readers surface it
        self.last_error: Exception | None = None
        self._error_listeners: list[ErrorListener] = []
        #: failed LIST/WATCH attempts so far (each one waits before the next)
        self.failures = 0
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._listed: list[asyncio.Future[None]] = []  # reselect() callers waiting for a LIST
        self._listed_selector: str | None = None  # the label selector of the last stored LIST
        self._resume = False  # the next run starts watching at last_resource_version (widen)

    # -- public -----------------------------------------------------------------------------------

    def add_event_handler(self, handler: EventHandler) -> None:
        """Register a handler; if already synced, it first receives an add for every cached object."""
        self.handlers.append(handler)
        if self.has_synced():
            for obj in self.store.list():
                self._call(handler.on_add, obj)

    def add_error_listener(self, listener: ErrorListener) -> None:
        """Call ``listener(old, new)`` whenever :attr:`last_error` changes kind: from None to an
        error, back to None, or to an error of another type or HTTP status (not on every retry)."""
        self._error_listeners.append(listener)

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self, timeout: float | None = None) -> None:
        await asyncio.wait_for(self._synced.wait(), timeout)

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name=f"informer {self.resource.group_resource}")
        return self._task

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def reselect(self, label_selector: str | None) -> None:
        """Use ``label_selector`` from now on; if running, re-list with it and return once stored.

        Objects no longer selected leave the store (handlers get a delete), newly selected ones
        enter it (an add); objects selected before and after get no event unless they changed.
        Waits (through list/watch retries) until that LIST has been stored; cancel to give up.
        """
        running = self._task is not None and not self._task.done()
        if label_selector == self.label_selector and (not running or self._listed_selector == label_selector):
            return
        changed = label_selector != self.label_selector
        self.label_selector = label_selector
        if not running:
            return  # the first LIST, at start(), uses it
        if changed:
            await self.stop()
        await self._until_listed(restart=changed)

    async def _until_listed(self, *, restart: bool) -> None:
        """Wait until the reflector (restarted first if ``restart``) has stored a LIST."""
        listed = asyncio.get_running_loop().create_future()
        self._listed.append(listed)
        if restart:
            self.start()
        try:
            await listed
        finally:
            if listed in self._listed:
                self._listed.remove(listed)

    async def widen(self, label_selector: str | None, added: str) -> None:
        """Select more: ``label_selector`` from now on, which selects what the current selector
        does and what ``added`` selects. Only ``added`` is listed, at exactly the resourceVersion the
        watch had reached, and the watch resumes from there with the wider selector: the objects
        cached already are neither listed again nor missed (their changes meanwhile are replayed),
        the added ones enter the store (an add each). Falls back to :meth:`reselect` (a full re-list)
        when not running or synced yet, or when that version is gone (compacted) or the LIST fails.
        """
        running = self._task is not None and not self._task.done()
        rv = self.last_resource_version
        if not running or not self.has_synced() or rv is None or label_selector == self.label_selector:
            await self.reselect(label_selector)
            return
        await self.stop()
        try:
            items, _ = await self._list_all(added, resource_version=rv)
        except (rclient.ApiError, OSError) as e:
            log.info(
                "could not list the added selection at the watched version, re-listing everything",
                extra={"resource": self.resource.group_resource, "error": str(e)},
            )
            self.label_selector = label_selector
            await self._until_listed(restart=True)
            return
        self._merge(items)
        self.label_selector = self._listed_selector = label_selector
        self.last_resource_version = rv
        self._resume = True
        self.start()

    async def run(self) -> None:
        """Run the reflector (and the resync timer) until cancelled."""
        async with background.task(self._resync_loop()):
            await self._reflect()

    # -- reflector ----------------------------------------------------------------------------------

    async def _reflect(self) -> None:
        backoff = ratelimiter.Backoff(
            BACKOFF_INITIAL, BACKOFF_CAP, jitter=BACKOFF_JITTER, reset_after=BACKOFF_RESET, clock=self.clock
        )
        # resumed by widen(): the store holds everything selected at last_resource_version
        need_list, self._resume = not self._resume, False
        while True:
            try:
                if need_list:
                    await self._list_and_replace()
                    need_list = False
                await self._watch_once()
            except rclient.ApiError as e:
                if e.gone:
                    log.info(
                        "watch expired, re-listing",
                        extra={"resource": self.resource.group_resource, "error": str(e)},
                    )
                    need_list = True
                    continue
                if e.status == 429:
                    delay = _retry_after_seconds(e)
                elif e.not_found:
                    delay = NOT_FOUND_RETRY
                else:
                    delay = backoff.next_delay()
                await self._retry_after(e, delay, "list/watch failed", str(e))
            except OSError as e:  # no HTTP answer (client.TransportError is one) or a socket error
                delay = backoff.next_delay()
                await self._retry_after(e, delay, "list/watch connection error", f"{type(e).__name__}: {e}")

    async def _retry_after(self, e: Exception, delay: float, message: str, error: str) -> None:
        """Count the failed attempt ``e``, log it, and wait ``delay`` seconds on the clock."""
        self._set_error(e)
        self.failures += 1
        log.warning(
            message,
            extra={"resource": self.resource.group_resource, "error": error, "retry_in": round(delay, 2)},
        )
        await self.clock.sleep(delay)

    async def _list_all(
        self, selector: str | None, *, resource_version: str | None = None
    ) -> tuple[list[Obj], str | None]:
        """Every page of a LIST with ``selector`` (at exactly ``resource_version`` if given), each
        object prepared, and the LIST's resourceVersion."""
        items: list[Obj] = []
        cont: str | None = None
        while True:
            page = await self.client.list(
                self.resource,
                self.namespace,
                label_selector=selector,
                field_selector=self.field_selector,
                limit=self.page_size,
                continue_=cont,
                # the first page names the version; the continue token carries it on
                resource_version=resource_version if cont is None else None,
                resource_version_match="Exact" if resource_version and cont is None else None,
                shape=self.shape,
            )
            # transform each page as it arrives, so a large LIST never holds every object untrimmed
            items.extend(self._prepare(obj) for obj in page.get("items") or ())
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or None
            if not cont:
                return items, meta.get("resourceVersion")

    async def _list_and_replace(self) -> None:
        selector = self.label_selector
        items, rv = await self._list_all(selector)
        self.relists += 1
        self._replace(items)
        self.last_resource_version = rv
        self._synced.set()
        self._set_error(None)
        self._listed_selector = selector
        listed, self._listed = self._listed, []
        for waiter in listed:
            if not waiter.done():
                waiter.set_result(None)

    def _replace(self, items: list[Obj]) -> None:
        fresh = {rstore.key_of(obj): obj for obj in items}
        for k in self.store.list_keys():
            if k not in fresh:
                gone = self.store.delete_key(k)
                if gone is not None:
                    self._notify_delete(gone)
        self._merge(fresh.values())

    def _merge(self, items: Iterable[Obj]) -> None:
        """Store ``items``: an add for each new one, an update for each changed one."""
        for obj in items:
            old = self.store.upsert(obj)
            if old is None:
                self._notify_add(obj)
            elif _rv(old) != _rv(obj):
                self._notify_update(old, obj)

    async def _watch_once(self) -> None:
        timeout = int(self.min_watch_timeout * (1.0 + random.random()))
        started = self.clock.now()
        async for event in self.client.watch(
            self.resource,
            self.namespace,
            resource_version=self.last_resource_version,
            timeout_seconds=timeout,
            allow_bookmarks=True,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            shape=self.shape,
        ):
            kind = event.get("type")
            obj: Obj = event.get("object") or {}
            rv = _rv(obj)
            if kind == "BOOKMARK":
                self.last_resource_version = rv or self.last_resource_version
                continue
            obj = self._prepare(obj)
            if kind in ("ADDED", "MODIFIED"):
                old = self.store.upsert(obj)
                if old is None:
                    self._notify_add(obj)
                else:
                    self._notify_update(old, obj)
            elif kind == "DELETED":
                self.store.delete(obj)
                self._notify_delete(obj)
            self.last_resource_version = rv or self.last_resource_version
        log.debug(
            "watch closed by the server",
            extra={
                "resource": self.resource.group_resource,
                "seconds": round(self.clock.now() - started, 1),
            },
        )

    async def _resync_loop(self) -> None:
        if self.resync_period <= 0:
            return
        while True:
            await self.clock.sleep(self.resync_period * (1.0 + 0.1 * random.random()))
            if self.has_synced():
                self.resync()

    def resync(self) -> None:
        """Re-deliver every cached object as an update, without contacting the server."""
        for obj in self.store.list():
            self._notify_update(obj, obj)

    # -- delivery -----------------------------------------------------------------------------------

    def _set_error(self, error: Exception | None) -> None:
        old, self.last_error = self.last_error, error
        if _error_kind(old) == _error_kind(error):
            return
        for listener in list(self._error_listeners):
            try:
                listener(old, error)
            except Exception:
                log.exception("error listener failed", extra={"resource": self.resource.group_resource})

    def _prepare(self, obj: Obj) -> Obj:
        """Fill kind/apiVersion (LIST items lack them) and run the transform."""
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        return self.transform(obj) if self.transform else obj

    def _notify_add(self, obj: Obj) -> None:
        for h in self.handlers:
            self._call(h.on_add, obj)

    def _notify_update(self, old: Obj, new: Obj) -> None:
        for h in self.handlers:
            self._call(h.on_update, old, new)

    def _notify_delete(self, obj: Obj) -> None:
        for h in self.handlers:
            self._call(h.on_delete, obj)

    def _call(self, fn: Callable[..., None], *args: Obj) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("event handler failed", extra={"resource": self.resource.group_resource})


def _error_kind(error: Exception | None) -> tuple[str, int | None] | None:
    """What tells two list/watch errors apart for listeners: type and HTTP status."""
    if error is None:
        return None
    return type(error).__name__, error.status if isinstance(error, rclient.ApiError) else None


def _rv(obj: Obj) -> str | None:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return str(rv) if rv is not None else None


def _retry_after_seconds(e: rclient.ApiError) -> float:
    details = e.body.get("details") or {}
    try:
        return max(0.1, min(float(details.get("retryAfterSeconds") or 1), codec.MAX_RETRY_AFTER_SECONDS))
    except (TypeError, ValueError):
        return 1.0
