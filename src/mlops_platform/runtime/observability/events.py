"""An ``events.k8s.io/v1`` event recorder with client-go style aggregation and spam filtering.

Contract:

- :meth:`EventRecorder.event` never blocks and never raises: it does the bookkeeping at once and
  leaves the API writes to a background task (:meth:`~EventRecorder.start`); :meth:`flush` waits
  for the queued writes and :meth:`stop` flushes everything still pending, then ends the task.
  Write errors are logged and the event dropped (transient ones are retried a few times first).
- **Aggregation.** Occurrences with the same key (the object's apiVersion/kind/namespace/name/uid,
  plus type, reason, action and note; *not* its resourceVersion) that come within ``window``
  seconds of the previous one belong to one Event object: the first creates it (``eventTime`` =
  first occurrence), later ones bump its ``series`` (``count``, ``lastObservedTime``) through a
  merge patch. Repeats arriving while a write is pending are coalesced into a single write.
- **Spam filter.** Every API write about an object takes a token from that object's bucket
  (``burst`` tokens, one more every ``refill_seconds``; client-go: 25 and 300 s). A *new* Event
  without a token is dropped (:attr:`dropped` counts them); a series update without a token is
  deferred until the bucket refills, so counts are never lost, only delayed. :meth:`stop` writes
  deferred updates regardless (at most one per Event already admitted).
- Events are named ``<object name>.<hex>`` and live in the object's namespace (``default`` for
  cluster-scoped objects). ``note`` is truncated to 1024 bytes, ``reason``/``action`` to 128.

The recorder belongs to one asyncio event loop and is not thread-safe.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import logging
import re
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

from mlops_platform.runtime import rbac
from mlops_platform.runtime.clock import Clock, RealClock, TimerHandle, rfc3339, utcnow
from mlops_platform.runtime.observability import logs
from mlops_platform.runtime.queue import ratelimiter
from mlops_platform.runtime.transport.client import JSON, ApiError, PatchType, Resource
from mlops_platform.runtime.transport.resources import EVENT

__all__ = ["EventRecorder", "EventSink", "EventType", "truncate_note"]

RBAC = rbac.requires("events.k8s.io", "events", ["create", "patch"], why="Events about reconciled objects")
log = logging.getLogger("mlops_platform.runtime.observability.events")

EventType = Literal["Normal", "Warning"]
NOTE_LIMIT = 1024
FIELD_LIMIT = 128
MAX_ENTRIES = 4096
MAX_TRIES = 5
#: transient write failures: retried after 1, 2, 4, 8 s (failure n waits 0.5 * 2**n, at most 30 s)
RETRY_BACKOFF = ratelimiter.Exponential(0.5, 30.0)
_INVALID_NAME = re.compile(r"[^a-z0-9.-]+")


class EventSink(Protocol):
    """The part of :class:`~mlops_platform.runtime.client.Client` the recorder needs."""

    async def create(self, res: Resource, obj: JSON, namespace: str | None = None) -> JSON: ...

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = ...,
    ) -> JSON: ...


def truncate_note(note: str, limit: int = NOTE_LIMIT) -> str:
    """Cut ``note`` to at most ``limit`` UTF-8 bytes without splitting a character."""
    raw = note.encode()
    return note if len(raw) <= limit else raw[:limit].decode(errors="ignore")


@dataclasses.dataclass(eq=False, slots=True)
class _Entry:
    namespace: str
    body: JSON  # the Event as first created (without series)
    object_key: tuple[str, ...]
    count: int = 1
    written: int = 0  # occurrences reflected on the server
    created: bool = False
    last_seen: float = 0.0  # local monotonic clock
    last_wall: str = ""
    #: the reconcile id of the latest occurrence ("" without one)
    correlation: str = ""
    queued: bool = False
    deferred: TimerHandle | None = None
    failures: int = 0
    abandoned: bool = False  # a write failed for good: later repeats are only counted


class EventRecorder:
    """Records Events about objects for one controller instance (see the module docstring)."""

    def __init__(
        self,
        client: EventSink,
        reporting_controller: str,
        reporting_instance: str,
        *,
        window: float = 600.0,
        burst: int = 25,
        refill_seconds: float = 300.0,
        clock: Clock | None = None,
        wall_clock: Callable[[], datetime.datetime] | None = None,
        correlation_annotation: str | None = None,
    ) -> None:
        self._client = client
        #: when set, each Event carries the ``reconcile_id`` of the log context that recorded it (the
        #: latest occurrence's, for a series) in this annotation: one grep finds a reconcile's log
        #: line and its Events
        self.correlation_annotation = correlation_annotation
        self.reporting_controller = reporting_controller
        self.reporting_instance = reporting_instance[:FIELD_LIMIT]
        self.window, self.burst, self.refill_seconds = window, burst, refill_seconds
        if burst < 1 or refill_seconds <= 0:
            raise ValueError("burst must be >= 1 and refill_seconds > 0")
        self._clock: Clock = clock if clock is not None else RealClock()
        self._wall = wall_clock or utcnow
        self._entries: collections.OrderedDict[tuple[str, ...], _Entry] = collections.OrderedDict()
        self._buckets: collections.OrderedDict[tuple[str, ...], ratelimiter.TokenBucket] = (
            collections.OrderedDict()
        )
        self._queue: asyncio.Queue[_Entry] = asyncio.Queue()
        self._deferred: set[_Entry] = set()
        self._task: asyncio.Task[None] | None = None
        self._force = False
        self._stopped = False
        self._last_ns = 0
        #: new Events dropped by the spam filter, and API writes that succeeded.
        self.dropped = 0
        self.writes = 0
        #: the last 401/403 writing Events, per namespace (dropped after a later success there), so
        #: owners can surface "cannot create events" on their objects instead of only in the log
        self.denied: dict[str, ApiError] = {}
        self._denial_listeners: list[Callable[[str, bool], None]] = []

    # -- public API -------------------------------------------------------------------------------

    def add_denial_listener(self, listener: Callable[[str, bool], None]) -> None:
        """Call ``listener(namespace, denied)`` when writing Events in a namespace starts being
        refused (401/403) or succeeds again: the write happens after the owner's reconcile, which
        would otherwise never learn of it."""
        self._denial_listeners.append(listener)

    def _denial(self, namespace: str, error: ApiError | None) -> None:
        was = namespace in self.denied
        if error is None:
            self.denied.pop(namespace, None)
        else:
            self.denied[namespace] = error
        if was != (error is not None):
            for listener in list(self._denial_listeners):
                try:
                    listener(namespace, error is not None)
                except Exception:
                    log.exception("event denial listener failed", extra={"namespace": namespace})

    def start(self) -> None:
        """Start the background writer (idempotent)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._worker(), name="event-recorder")

    async def flush(self) -> None:
        """Wait until every queued write is done (starting the writer if needed).

        Deferred writes (rate-limited series updates, retries) are not waited for.
        """
        self.start()
        await self._queue.join()

    async def stop(self, timeout: float = 10.0) -> None:
        """Write everything pending (ignoring the spam filter for series updates), then stop."""
        self._stopped = self._force = True
        for entry in list(self._deferred):
            if entry.deferred is not None:
                entry.deferred.cancel()
            self._enqueue(entry)
        self.start()
        try:
            async with asyncio.timeout(timeout):
                await self._queue.join()
        except TimeoutError:
            log.error("event recorder stopped with %d writes pending", self._queue.qsize())
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    def event(self, obj: JSON, type_: EventType, reason: str, action: str, note: str = "") -> None:
        """Record one occurrence about ``obj`` (a dict with apiVersion, kind and metadata)."""
        try:
            self._record(obj, type_, reason, action, note)
        except Exception:
            log.exception("dropping event %s/%s: cannot record it", reason, action)

    # -- bookkeeping --------------------------------------------------------------------------------

    def _record(self, obj: JSON, type_: str, reason: str, action: str, note: str) -> None:
        if self._stopped:
            log.warning("event recorder is stopped: dropping event %s", reason)
            return
        if type_ not in ("Normal", "Warning"):
            raise ValueError(f"event type must be Normal or Warning, not {type_!r}")
        if not reason or not action:
            raise ValueError("event reason and action are required")
        meta = obj.get("metadata") or {}
        name = str(meta["name"])
        ref = {
            "apiVersion": str(obj["apiVersion"]),
            "kind": str(obj["kind"]),
            "name": name,
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        ref = {k: v for k, v in ref.items() if v}
        note, reason, action = truncate_note(note), reason[:FIELD_LIMIT], action[:FIELD_LIMIT]
        object_key = tuple(str(ref.get(k, "")) for k in ("apiVersion", "kind", "namespace", "name", "uid"))
        key = (*object_key, type_, reason, action, note)
        now, wall = self._clock.now(), rfc3339(self._wall(), 6)
        correlation = logs.current_context().get("reconcile_id", "") if self.correlation_annotation else ""
        entry = self._entries.get(key)
        if entry is not None and now - entry.last_seen <= self.window:
            entry.count += 1
            entry.last_seen, entry.last_wall = now, wall
            entry.correlation = correlation or entry.correlation
            self._entries.move_to_end(key)
            if entry.deferred is None:
                self._enqueue(entry)
            return
        if not self._bucket(object_key, now).take(now):
            self.dropped += 1
            log.debug("spam filter: dropping event %s about %s", reason, "/".join(object_key))
            return
        namespace = str(ref.get("namespace") or "default")
        metadata: JSON = {"name": self._event_name(name), "namespace": namespace}
        if correlation and self.correlation_annotation:
            metadata["annotations"] = {self.correlation_annotation: correlation}
        body = {
            "apiVersion": EVENT.api_version,
            "kind": EVENT.kind,
            "metadata": metadata,
            "eventTime": wall,
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": action,
            "reason": reason,
            "type": type_,
            "note": note,
            "regarding": ref,
        }
        entry = _Entry(namespace, body, object_key, last_seen=now, last_wall=wall, correlation=correlation)
        self._entries[key] = entry
        while len(self._entries) > MAX_ENTRIES:
            self._entries.popitem(last=False)
        self._enqueue(entry)

    def _bucket(self, object_key: tuple[str, ...], now: float) -> ratelimiter.TokenBucket:
        bucket = self._buckets.get(object_key)
        if bucket is None:
            bucket = self._buckets[object_key] = ratelimiter.TokenBucket(
                1.0 / self.refill_seconds, self.burst, now
            )
            while len(self._buckets) > MAX_ENTRIES:
                self._buckets.popitem(last=False)
        self._buckets.move_to_end(object_key)
        return bucket

    def _event_name(self, object_name: str) -> str:
        self._last_ns = max(time.time_ns(), self._last_ns + 1)
        base = _INVALID_NAME.sub("-", object_name.lower())[:236].strip(".-") or "object"
        return f"{base}.{self._last_ns:x}"

    def _enqueue(self, entry: _Entry) -> None:
        entry.deferred = None
        self._deferred.discard(entry)
        if not entry.queued:
            entry.queued = True
            self._queue.put_nowait(entry)

    def _defer(self, entry: _Entry, delay: float) -> None:
        if self._force:
            self._enqueue(entry)
        elif entry.deferred is None:
            entry.deferred = self._clock.call_later(delay, lambda: self._enqueue(entry))
            self._deferred.add(entry)

    # -- writing ------------------------------------------------------------------------------------

    async def _worker(self) -> None:
        while True:
            entry = await self._queue.get()
            entry.queued = False
            try:
                await self._write(entry)
            except Exception:  # never let the writer die
                log.exception("unexpected error writing event %s", entry.body["metadata"]["name"])
            finally:
                self._queue.task_done()

    async def _write(self, entry: _Entry) -> None:
        count = entry.count
        if entry.abandoned or count <= entry.written:
            return
        name = entry.body["metadata"]["name"]
        if entry.created and not self._force:
            bucket = self._bucket(entry.object_key, self._clock.now())
            if not bucket.take(self._clock.now()):
                self._defer(entry, bucket.delay(self._clock.now()))
                return
        series = {"count": count, "lastObservedTime": entry.last_wall}
        try:
            if not entry.created:
                await self._create(entry, series if count > 1 else None)
            else:
                patch: JSON = {"series": series}
                if entry.correlation and self.correlation_annotation:
                    patch["metadata"] = {"annotations": {self.correlation_annotation: entry.correlation}}
                try:
                    await self._client.patch(
                        EVENT, name, patch, namespace=entry.namespace, patch_type="merge"
                    )
                except ApiError as e:
                    if not e.not_found:
                        raise
                    await self._create(entry, series)  # deleted meanwhile (TTL): start over
        except Exception as e:
            entry.failures += 1
            if isinstance(e, ApiError) and e.status in (401, 403):
                self._denial(entry.namespace, e)
            transient = not isinstance(e, ApiError) or e.status >= 500 or e.status == 429
            if transient and entry.failures < MAX_TRIES and not self._force:
                log.warning("error writing event %s (will retry): %s", name, e)
                self._defer(entry, RETRY_BACKOFF.delay(entry.failures))
            else:
                log.error("dropping event %s: %s", name, e)
                entry.abandoned = True
            return
        entry.failures = 0
        self._denial(entry.namespace, None)
        entry.written = count
        self.writes += 1
        if entry.count > entry.written:
            self._enqueue(entry)

    async def _create(self, entry: _Entry, series: JSON | None) -> None:
        body = dict(entry.body)
        if entry.correlation and self.correlation_annotation:
            meta = dict(body["metadata"])
            meta["annotations"] = {self.correlation_annotation: entry.correlation}
            body["metadata"] = meta
        if series is not None:
            body["series"] = series
        try:
            await self._client.create(EVENT, body, entry.namespace)
        except ApiError as e:
            if not e.conflict:  # AlreadyExists: an earlier, timed-out attempt made it
                raise
        entry.created = True
