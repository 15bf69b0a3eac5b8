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
import dataclasses
import time
from pathlib import Path
from typing import Any

from mlops_platform.api import crd
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.webhook import keeper
from mlops_platform.testing import conversionload, webhook

JSON = dict[str, Any]
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


async def test_certificates_rotate_under_load_with_zero_failed_conversions(
    admin_client: rclient.Client, namespace: str, kube_cluster: Path, tmp_path: Path
) -> None:
    c = admin_client
    session_url = webhook.url()
    rotations = Rotations()
    async with webhook.paused(c):
        await webhook.delete_secret(c, SECRET)  # a fresh CA: the rotation happens on schedule
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
                    load = conversionload.ConversionLoad(lc, namespace, cycles_after=CYCLES_AFTER)
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
            await webhook.delete_secret(c, SECRET)
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
