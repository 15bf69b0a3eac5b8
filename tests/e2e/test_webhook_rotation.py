"""Certificate rotation of the conversion webhook on the real InferenceService CRD, under load, with
zero failed conversions.

A second ``mlops-platform webhook`` process with short-lived certificates (its own Secret and port;
``--webhook-cert-validity 60``, the flag's minimum: a 60 s CA that starts rotating at 40 s, a new CA
trusted 7.5 s before it signs and the old one 7.5 s after; 20 s serving certificates renewed every
~13 s; a check every 1.5 s) serves the CRD while workers create, read, update, list and delete
objects in v1alpha1 and v1beta1 (each one a conversion from the v1 storage version), until the CA
was replaced and the old one retired. A failure is any answer but a success or a 429 (retried, as
client-go does: the API server's watch cache re-initialising after a CRD update). The session's
webhook is paused meanwhile (it would inject its own bundle) and the CRD restored to it afterwards
(``webhook.paused``).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any

from mlops_platform.api import crd
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.transport.rest import RequestRecord
from mlops_platform.runtime.webhook import keeper
from mlops_platform.testing import isvc, webhook

JSON = dict[str, Any]
ALPHA = isvc.RESOURCE
BETA = rclient.Resource(crd.RESOURCE.group, "v1beta1", crd.RESOURCE.plural, crd.RESOURCE.kind)
SECRET = ("mlops-system", "mlops-platform-webhook-tls-rotation")
VALIDITY = 60  # seconds: the smallest --webhook-cert-validity
#: the CA rotation (published at 40 s, switched at 47.5 s, retired at 55 s) must end within this
DEADLINE = 90.0
WORKERS = 4
#: full cycles each worker still runs once the old CA is retired
CYCLES_AFTER = 2


@dataclasses.dataclass
class Rotations:
    """What the second webhook's Secret and the CRD went through."""

    cas: list[bytes] = dataclasses.field(default_factory=list)
    servings: list[bytes] = dataclasses.field(default_factory=list)
    phases: list[str] = dataclasses.field(default_factory=list)
    bundles: list[bytes] = dataclasses.field(default_factory=list)
    retired: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    def record_secret(self, secret: JSON) -> None:
        data = secret.get("data") or {}
        ca, tls = data.get(keeper.CA_CRT, ""), data.get(keeper.TLS_CRT, "")
        phase = (secret["metadata"].get("annotations") or {}).get(keeper.PHASE_ANNOTATION, "")
        for seen, value in ((self.cas, ca), (self.servings, tls), (self.phases, phase)):
            if value and (not seen or seen[-1] != value):
                seen.append(value)
        # the CA replaced and the previous one dropped from the bundle: a whole rotation
        if len(self.cas) >= 2 and phase == "steady":
            self.retired.set()

    def record_crd(self, obj: JSON) -> None:
        raw = (
            ((obj["spec"].get("conversion") or {}).get("webhook") or {})
            .get("clientConfig", {})
            .get("caBundle")
        )
        if raw and (not self.bundles or self.bundles[-1] != base64.b64decode(raw)):
            self.bundles.append(base64.b64decode(raw))


async def _follow(
    c: rclient.Client, res: rclient.Resource, name: str, namespace: str | None, record: Any
) -> None:
    """Record ``name`` now and on every change (a watch, re-established when the server ends it)."""
    while True:
        obj = await c.get(res, name, namespace)
        record(obj)
        async for event in c.watch(
            res,
            namespace,
            resource_version=obj["metadata"]["resourceVersion"],
            field_selector=f"metadata.name={name}",
            timeout_seconds=30,
        ):
            if event["type"] in ("ADDED", "MODIFIED"):
                record(event["object"])


@dataclasses.dataclass
class Load:
    """Workers' requests through the conversion webhook: every one counted, every failure kept.

    The client retries like client-go: a 429 (with Retry-After) is asked again. Each CRD update (a new
    caBundle) makes the API server rebuild the resource's storage, whose watch cache answers 429
    "storage is (re)initializing" meanwhile: counted in :attr:`answers`, not a failure. Any other
    answer but a success (a failed conversion is a 500) is a failure, retried or not."""

    client: rclient.Client
    namespace: str
    requests: int = 0
    failures: list[str] = dataclasses.field(default_factory=list)
    answers: collections.Counter[int] = dataclasses.field(default_factory=collections.Counter)
    cycles: int = 0
    stopping: bool = False

    def __post_init__(self) -> None:
        self.client.observers.append(self.observe)

    def observe(self, record: RequestRecord) -> None:
        self.answers[record.code] += 1
        if not (200 <= record.code < 300 or record.code == 429):
            self.failures.append(f"{time.monotonic():.1f} {record.verb} {record.resource}: {record.code}")

    async def call(self, what: str, request: Any) -> Any:
        self.requests += 1
        try:
            return await request
        except Exception as e:
            self.failures.append(f"{time.monotonic():.1f} {what}: {type(e).__name__}: {e}")
            raise

    async def worker(self, k: int) -> None:
        """Cycles until :attr:`stopping`, then :data:`CYCLES_AFTER` more."""
        n = 0
        while not self.stopping:
            await self.cycle(f"w{k}-{n}")
            n += 1
        for m in range(n, n + CYCLES_AFTER):
            await self.cycle(f"w{k}-{m}")

    async def cycle(self, name: str) -> None:
        c, ns = self.client, self.namespace
        body = isvc.manifest(name, modelUri=f"gs://models/{name}/1", framework="triton", maxReplicas=2)
        with contextlib.suppress(Exception):  # already counted and kept: go on with the next one
            await self.call("create v1alpha1", c.create(ALPHA, body, ns))
            beta = await self.call("get v1beta1", c.get(BETA, name, ns))
            beta["spec"]["predictor"]["autoscaling"]["maxReplicas"] = 3
            await self.call("update v1beta1", c.replace(BETA, beta))
            alpha = await self.call("get v1alpha1", c.get(ALPHA, name, ns))
            if alpha["spec"]["maxReplicas"] != 3:
                self.failures.append(f"{name}: v1alpha1 reads maxReplicas {alpha['spec']['maxReplicas']}")
            await self.call("list v1alpha1", c.list(ALPHA, ns))
            await self.call("list v1beta1", c.list(BETA, ns))
            await self.call("delete v1alpha1", c.delete(ALPHA, name, ns))
            self.cycles += 1


async def _delete_secret(c: rclient.Client) -> None:
    try:
        await c.delete(resources.SECRET, SECRET[1], SECRET[0])
    except rclient.ApiError as e:
        if not e.not_found:
            raise


async def test_certificates_rotate_under_load_with_zero_failed_conversions(
    admin_client: rclient.Client, namespace: str, kube_cluster: Path, tmp_path: Path
) -> None:
    c = admin_client
    session_url = webhook.url()
    rotations = Rotations()
    async with webhook.paused(c):
        await _delete_secret(c)  # a fresh CA: the rotation happens on schedule
        try:
            async with webhook.serving(
                kube_cluster,
                c,
                log_path=tmp_path / "rotation-webhook.log",
                secret=SECRET,
                extra_args=("--webhook-cert-validity", str(VALIDITY)),
            ) as address:
                live = await c.get(resources.CRD, crd.CRD_NAME)
                assert live["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == address != session_url
                assert await webhook.ca_bundle(c) == await webhook.stored_bundle(c, SECRET)
                followers = [
                    asyncio.create_task(
                        _follow(c, resources.SECRET, SECRET[1], SECRET[0], rotations.record_secret)
                    ),
                    asyncio.create_task(_follow(c, resources.CRD, crd.CRD_NAME, None, rotations.record_crd)),
                ]
                async with rclient.Client.from_kubeconfig(kube_cluster, max_retries=3) as lc:
                    load = Load(lc, namespace)
                    started = time.monotonic()
                    workers = [asyncio.create_task(load.worker(k)) for k in range(WORKERS)]
                    try:
                        await asyncio.wait_for(rotations.retired.wait(), DEADLINE)
                        rotated_after = time.monotonic() - started
                        load.stopping = True
                        await asyncio.wait_for(asyncio.gather(*workers), 60)
                    finally:
                        for task in (*workers, *followers):
                            task.cancel()
                        await asyncio.gather(*workers, *followers, return_exceptions=True)
                    ran = time.monotonic() - started
        finally:
            await _delete_secret(c)
    # the session's webhook serves the CRD again, its bundle injected
    live = await c.get(resources.CRD, crd.CRD_NAME)
    assert live["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == session_url == webhook.url()
    assert await webhook.ca_bundle(c) == await webhook.stored_bundle(c)

    summary = (
        f"{load.requests} requests in {ran:.0f}s ({load.cycles} cycles), "
        f"CA rotated after {rotated_after:.0f}s: {len(rotations.cas)} CAs, "
        f"{len(rotations.servings)} serving certificates, phases {rotations.phases}, "
        f"{len(rotations.bundles)} bundles injected; answers {dict(load.answers)}"
    )
    assert not load.failures, f"{len(load.failures)} failed: {load.failures[:10]}; {summary}"
    assert len(rotations.cas) >= 2 and rotations.cas[0] != rotations.cas[-1], summary
    assert len(rotations.servings) >= 4, summary  # the first, renewals, and the new CA's
    assert rotations.phases[-3:] == ["publishing", "retiring", "steady"], summary
    assert len(rotations.bundles) >= 3, summary  # the first CA, both, the new one
    assert load.cycles >= WORKERS * CYCLES_AFTER, summary
    print(summary)
