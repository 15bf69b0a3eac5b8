"""Lease-based leader election, after client-go ``tools/leaderelection`` with a ``LeaseLock``.

Contract (one :class:`LeaderElector` per candidate; all candidates share a coordination.k8s.io/v1
Lease ``namespace/name`` and use distinct identities):

- **Acquire.** The candidate tries at once, then every ``retry_period * (1 + 1.2 * rand)``, or
  sooner, just after the record of another holder it observed expires (unlike client-go, so a
  crashed leader is replaced within ``lease_duration + (1 + 1.2) * retry_period`` of its last
  renewal): it creates the Lease if it is missing, or takes it over when the holder is empty or the
  record has expired. Expiry is judged like client-go, by the *local* clock: the time at which this
  candidate last observed the record change, plus the record's ``leaseDurationSeconds``; the
  server's timestamps are never compared with the local clock (no clock-skew assumptions).
  Taking over from another holder increments ``leaseTransitions`` and sets ``acquireTime``.
- **Renew.** The leader rewrites ``renewTime`` every ``retry_period`` (an optimistic update of its
  cached Lease first, a fresh read-modify-write on failure). Every write is an update guarded by
  ``metadata.resourceVersion``, so concurrent writers get 409 Conflict and lose that round.
  If no renewal succeeds within ``renew_deadline``, leadership is lost and :meth:`run` returns.
- **Stop.** :meth:`stop` or cancelling :meth:`run` ends the election. The leader's work is
  cancelled and awaited first; then, with ``release_on_cancel``, the Lease is released
  (``holderIdentity`` cleared, ``leaseDurationSeconds: 1``) so a standby takes over at its next
  retry instead of waiting for expiry.
- ``on_started_leading()`` runs as a task for as long as leadership lasts and is cancelled when it
  ends; if it raises, leadership is given up and :meth:`run` re-raises the error.
  ``on_stopped_leading()`` is called once leadership has ended (unlike client-go, only if it began).
- The gauge ``leader_election_master_status{name}`` is 1 while leading, else 0.

Timestamps are written as RFC 3339 micro time (``2006-01-02T15:04:05.000000Z``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import logging
import math
import random
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from mlops_platform.runtime import rbac
from mlops_platform.runtime.clock import Clock, RealClock, rfc3339, utcnow
from mlops_platform.runtime.transport.client import JSON, ApiError, Client
from mlops_platform.runtime.transport.resources import LEASE

__all__ = ["JITTER_FACTOR", "LeaderElectionConfig", "LeaderElector"]

RBAC = rbac.requires(
    "coordination.k8s.io",
    "leases",
    ["get", "create", "update"],
    why="leader election Lease",
    scope="leader-election",
)
log = logging.getLogger("mlops_platform.runtime.control.leaderelection")

#: client-go's ``JitterFactor`` for acquire retries.
JITTER_FACTOR = 1.2
#: how long after the observed expiry of another holder's record a candidate tries again (a timer
#: may fire a little early; the record must have expired by the local clock when it looks)
EXPIRY_MARGIN = 0.05
_RECORD_KEYS = ("holderIdentity", "leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")
_GAUGES: weakref.WeakKeyDictionary[CollectorRegistry, Gauge] = weakref.WeakKeyDictionary()

Callback = Callable[[], Awaitable[Any] | None]


def _master_gauge(registry: CollectorRegistry) -> Gauge:
    gauge = _GAUGES.get(registry)
    if gauge is None:
        gauge = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
            "1 indicates master. 'name' is the string used to identify the lease.",
            ["name"],
            registry=registry,
        )
        _GAUGES[registry] = gauge
    return gauge


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """Where the Lease lives, who we are and the timing (seconds), validated like client-go."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    release_on_cancel: bool = True

    def __post_init__(self) -> None:
        if not (self.namespace and self.name and self.identity):
            raise ValueError("namespace, name and identity are required")
        if self.retry_period <= 0 or self.renew_deadline <= 0:
            raise ValueError("retry_period and renew_deadline must be > 0")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(f"renew_deadline must be greater than {JITTER_FACTOR} * retry_period")


class LeaderElector:
    """One candidate in a Lease election (see the module docstring for the contract)."""

    def __init__(
        self,
        client: Client,
        config: LeaderElectionConfig,
        *,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        wall_clock: Callable[[], datetime.datetime] = utcnow,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._client = client
        self.config = config
        self._clock: Clock = clock if clock is not None else RealClock()
        self._wall = wall_clock
        self._rand = rand
        self._gauge = _master_gauge(registry if registry is not None else REGISTRY).labels(name=config.name)
        self._gauge.set(0)
        self._leading = False
        self._running = False
        self._stopping = asyncio.Event()
        self._lease: JSON | None = None  # last Lease object read or written
        self._observed: dict[str, Any] = {}  # its leader election record
        self._observed_time = 0.0  # local clock when the record last changed

    def is_leader(self) -> bool:
        """True between acquiring the Lease and the end of leadership (loss, stop or cancel)."""
        return self._leading

    @property
    def leader_identity(self) -> str:
        """The holder of the Lease as last observed ("" if none or not observed yet)."""
        return str(self._observed.get("holderIdentity") or "")

    def stop(self) -> None:
        """Ask :meth:`run` to end gracefully (release if leading and ``release_on_cancel``)."""
        self._stopping.set()

    async def run(self, on_started_leading: Callback, on_stopped_leading: Callback | None = None) -> None:
        """Campaign until leading, lead until leadership is lost or the election is stopped.

        Returns when leadership was lost or :meth:`stop` was called; cancellation propagates after
        the same clean-up. An elector runs once at a time; after :meth:`stop` it returns at once.
        """
        if self._running:
            raise RuntimeError("LeaderElector.run is already running")
        self._running = True
        work: asyncio.Task[Any] | None = None
        error: BaseException | None = None
        try:
            if not await self._acquire():
                return
            self._set_leading(True)
            work = asyncio.create_task(_call(on_started_leading), name=f"leader:{self.config.name}")
            await self._renew(work)
        finally:
            self._set_leading(False)
            try:
                if work is not None:
                    if work.done() and not work.cancelled():
                        error = work.exception()
                    work.cancel()
                    await asyncio.gather(work, return_exceptions=True)
                if self.config.release_on_cancel:
                    await self._release()
            finally:
                self._running = False
                if work is not None and on_stopped_leading is not None:
                    await _call(on_stopped_leading)
        if error is not None:
            raise error

    # -- the loops --------------------------------------------------------------------------------

    async def _acquire(self) -> bool:
        cfg = self.config
        log.info("attempting to acquire leader lease %s/%s as %s", cfg.namespace, cfg.name, cfg.identity)
        while not self._stopping.is_set():
            if await self._try_acquire_or_renew(cfg.renew_deadline):
                log.info("successfully acquired lease %s/%s as %s", cfg.namespace, cfg.name, cfg.identity)
                return True
            await self._wait(self._acquire_delay(), None)
        return False

    def _acquire_delay(self) -> float:
        """The jittered retry period, cut short to just past the moment the observed record of
        another holder expires: a dead leader's Lease is taken when it runs out, not up to a whole
        jittered period later. A takeover after a crash is so bounded by one jittered period (the
        last renewal observed at most that late) plus the lease duration: 15 s + 2 x 2.2 s = 19.4 s
        with the defaults, where the next jittered retry could add another 4.4 s."""
        delay = self.config.retry_period * (1.0 + JITTER_FACTOR * self._rand())
        if self.leader_identity and self.leader_identity != self.config.identity:
            expires_in = self._expires_in()
            if expires_in > 0:  # an expired record (a failed attempt): the plain retry, no busy loop
                delay = min(delay, expires_in + EXPIRY_MARGIN)
        return delay

    async def _renew(self, work: asyncio.Task[Any]) -> None:
        cfg = self.config
        while not await self._wait(cfg.retry_period, work):
            deadline = self._clock.now() + cfg.renew_deadline
            while not await self._try_acquire_or_renew(deadline - self._clock.now()):
                if await self._wait(cfg.retry_period, work):
                    return
                if self._clock.now() >= deadline:
                    log.error(
                        "failed to renew lease %s/%s within %.1fs: leadership lost",
                        cfg.namespace,
                        cfg.name,
                        cfg.renew_deadline,
                    )
                    return

    async def _wait(self, seconds: float, work: asyncio.Task[Any] | None) -> bool:
        """Sleep; return early (True) if stopped or the leader's work failed."""
        waiters: set[asyncio.Future[Any]] = {
            asyncio.ensure_future(self._clock.sleep(seconds)),
            asyncio.ensure_future(self._stopping.wait()),
        }
        if work is not None and not work.done():
            waiters.add(work)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                if w is not work:
                    w.cancel()
        failed = work is not None and work.done() and (work.cancelled() or work.exception() is not None)
        if failed:
            log.error("leader work of %s ended with an error: giving up leadership", self.config.name)
        return self._stopping.is_set() or failed

    # -- one attempt ------------------------------------------------------------------------------

    async def _try_acquire_or_renew(self, timeout: float) -> bool:
        try:
            async with asyncio.timeout(max(timeout, 0.001)):
                return await self._attempt()
        except Exception as e:  # API, transport and timeout errors alike: this round is lost
            log.warning("error updating lease %s/%s: %r", self.config.namespace, self.config.name, e)
            return False

    def _record(self, acquire_time: str, transitions: int) -> dict[str, Any]:
        now = rfc3339(self._wall(), 6)
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.config.lease_duration)),
            "acquireTime": acquire_time or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    async def _attempt(self) -> bool:
        cfg = self.config
        # Fast path: while the last observed record is ours and valid, update the cached Lease
        # without reading it first.
        if self._lease is not None and self.leader_identity == cfg.identity and self._valid():
            try:
                rec = self._record(self._observed.get("acquireTime", ""), self._transitions())
                self._store(await self._update(self._lease, rec))
                return True
            except ApiError as e:
                log.info("optimistic lease update failed (%s), falling back to a read", e.reason)
        try:
            lease = await self._client.get(LEASE, cfg.name, cfg.namespace)
        except ApiError as e:
            if not e.not_found:
                raise
            body = {
                "apiVersion": LEASE.api_version,
                "kind": LEASE.kind,
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": self._record("", 0),
            }
            self._store(await self._client.create(LEASE, body, cfg.namespace))
            return True
        self._store(lease)
        holder = self.leader_identity
        if holder and holder != cfg.identity and self._valid():
            return False
        if holder == cfg.identity:
            rec = self._record(self._observed.get("acquireTime", ""), self._transitions())
        else:
            rec = self._record("", self._transitions() + 1)
        self._store(await self._update(lease, rec))
        return True

    async def _update(self, lease: JSON, record: dict[str, Any]) -> JSON:
        body = {**lease, "spec": {**lease.get("spec", {}), **record}}
        return await self._client.replace(LEASE, body)

    async def _release(self) -> None:
        if self._lease is None or self.leader_identity != self.config.identity:
            return
        now = rfc3339(self._wall(), 6)
        rec = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": self._transitions(),
        }
        try:
            async with asyncio.timeout(self.config.renew_deadline):
                self._store(await self._update(self._lease, rec))
            log.info("released lease %s/%s", self.config.namespace, self.config.name)
        except Exception as e:
            log.error("failed to release lease %s/%s: %r", self.config.namespace, self.config.name, e)

    # -- bookkeeping ------------------------------------------------------------------------------

    def _store(self, lease: JSON) -> None:
        spec = lease.get("spec") or {}
        record = {k: spec.get(k) for k in _RECORD_KEYS}
        if record != self._observed:
            self._observed = record
            self._observed_time = self._clock.now()
        self._lease = lease

    def _transitions(self) -> int:
        return int(self._observed.get("leaseTransitions") or 0)

    def _expires_in(self) -> float:
        """Seconds until the observed record expires by the local clock (<= 0: expired)."""
        duration = self._observed.get("leaseDurationSeconds")
        seconds = float(duration) if duration else self.config.lease_duration
        return self._observed_time + seconds - self._clock.now()

    def _valid(self) -> bool:
        """Whether the observed record has not expired, by the local clock."""
        return self._expires_in() > 0

    def _set_leading(self, leading: bool) -> None:
        if leading != self._leading:
            self._leading = leading
            self._gauge.set(1 if leading else 0)
            if not leading:
                log.info("stopped leading %s/%s", self.config.namespace, self.config.name)


async def _call(callback: Callback) -> Any:
    result = callback()
    if inspect.isawaitable(result):
        return await result
    return result
