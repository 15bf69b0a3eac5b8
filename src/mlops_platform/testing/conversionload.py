"""Requests through the conversion webhook, as a test's load: every one counted, every failure kept.

Each cycle creates an InferenceService in v1alpha1, reads and updates it in v1beta1, reads it back
in v1alpha1 (the update must be there), lists both versions and deletes it: every request is a
conversion from the v1 storage version. The client retries like client-go: a 429 (with Retry-After)
is asked again. A CRD update (a new caBundle) makes the API server rebuild the resource's storage,
whose watch cache answers 429 "storage is (re)initializing" meanwhile: counted in
:attr:`ConversionLoad.answers`, not a failure. Any other answer but a success (a failed conversion is
a 500) is a failure, unless ``retries`` allows asking again: then a 500 naming the conversion webhook
(the API server could not reach it, e.g. its replica was killed mid-request) is asked again up to
that many times, ``retry_after`` seconds later, as a controller's requeue would (the API server
takes a moment to drop its pooled connections to a replica that died: asked again at once, a
request can go out on another of them), each retry kept in :attr:`ConversionLoad.retried` (a
retried create, update or delete that finds the first attempt stored is done).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mlops_platform.api import crd
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport.rest import RequestRecord
from mlops_platform.testing import isvc

ALPHA = isvc.RESOURCE
BETA = rclient.Resource(crd.RESOURCE.group, "v1beta1", crd.RESOURCE.plural, crd.RESOURCE.kind)
#: what a retry answers when the attempt that failed had been stored (its answer's conversion failed)
_DONE_BY_THE_FAILED_ATTEMPT = {(409, "create"), (409, "update"), (404, "delete")}


@dataclasses.dataclass
class ConversionLoad:
    """Workers' cycles on ``client`` in ``namespace`` until :attr:`stopping`, then ``cycles_after``
    more each (so the load outlasts the event the test waits for)."""

    client: rclient.Client
    namespace: str
    cycles_after: int = 2
    retries: int = 0
    retry_after: float = 0.5
    requests: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)
    retried: list[str] = dataclasses.field(default_factory=list)
    answers: collections.Counter[int] = dataclasses.field(default_factory=collections.Counter)
    cycles: int = 0
    #: updates that met a newer resourceVersion (a status write) and were read and sent again
    conflicts: int = 0
    stopping: bool = False

    def __post_init__(self) -> None:
        self.client.observers.append(self.observe)

    def observe(self, record: RequestRecord) -> None:
        self.answers[record.code] += 1

    async def call(
        self, what: str, request: Callable[[], Awaitable[Any]], *, conflict_ok: bool = False
    ) -> Any:
        self.requests += 1
        for attempt in range(self.retries + 1):
            try:
                return await request()
            except rclient.ApiError as e:
                if conflict_ok and e.status == 409 and attempt == 0:
                    raise  # the caller reads and writes again (not a failure)
                if attempt > 0 and (e.status, what.split()[0]) in _DONE_BY_THE_FAILED_ATTEMPT:
                    # the failed attempt had been stored (only its answer's conversion failed): done;
                    # the cycle's next read checks an update is there
                    return None
                if attempt < self.retries and e.status == 500 and "conversion webhook" in str(e):
                    self.retried.append(f"{time.monotonic():.1f} {what}: {e}")
                    await asyncio.sleep(self.retry_after)  # a backoff, not a synchronization
                    continue
                self.failures.append(f"{time.monotonic():.1f} {what}: {type(e).__name__}: {e}")
                raise
            except Exception as e:
                self.failures.append(f"{time.monotonic():.1f} {what}: {type(e).__name__}: {e}")
                raise
        raise AssertionError("unreachable")

    async def worker(self, k: int) -> None:
        n = 0
        while not self.stopping:
            await self.cycle(f"w{k}-{n}")
            n += 1
        for m in range(n, n + self.cycles_after):
            await self.cycle(f"w{k}-{m}")

    async def update(self, name: str) -> None:
        """Read in v1beta1, set maxReplicas 3, replace; a 409 (an operator wrote the object's status
        between the read and the replace) is read and replaced again, as client-go's RetryOnConflict
        does, and counted in :attr:`conflicts`."""
        c, ns = self.client, self.namespace
        while True:
            beta = await self.call("get v1beta1", lambda: c.get(BETA, name, ns))
            beta["spec"]["predictor"]["autoscaling"]["maxReplicas"] = 3
            try:
                await self.call("update v1beta1", functools.partial(c.replace, BETA, beta), conflict_ok=True)
                return
            except rclient.ApiError as e:
                if e.status != 409:
                    raise
                self.conflicts += 1

    async def cycle(self, name: str) -> None:
        c, ns = self.client, self.namespace
        body = isvc.manifest(name, modelUri=f"gs://models/{name}/1", framework="triton", maxReplicas=2)
        with contextlib.suppress(Exception):  # already counted and kept: go on with the next one
            await self.call("create v1alpha1", lambda: c.create(ALPHA, body, ns))
            await self.update(name)
            alpha = await self.call("get v1alpha1", lambda: c.get(ALPHA, name, ns))
            if alpha["spec"]["maxReplicas"] != 3:
                self.failures.append(f"{name}: v1alpha1 reads maxReplicas {alpha['spec']['maxReplicas']}")
            await self.call("list v1alpha1", lambda: c.list(ALPHA, ns))
            await self.call("list v1beta1", lambda: c.list(BETA, ns))
            await self.call("delete v1alpha1", lambda: c.delete(ALPHA, name, ns))
            self.cycles += 1
