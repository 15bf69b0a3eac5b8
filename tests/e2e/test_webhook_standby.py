"""A standby replica serves the conversion webhook: the webhook is a cluster-wide dependency and must
never wait for leadership. An operator process that cannot lead (another holder's Lease) answers
ConversionReviews over TLS, reports ready, and counts the requests with controller-runtime's metric
names. Its certificate comes from mounted files (cert-manager mode), so it writes no Secret and
leaves the session webhook's CA bundle in the CRD alone."""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from mlops_platform.api import conversion
from mlops_platform.runtime.clock import rfc3339
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.webhook import keypairs
from mlops_platform.testing import isvc, ports, wait, webhook

ELECTION_ID = "standby-webhook-test"


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    try:
        async with session.get(url) as r:
            return r.status, await r.text()
    except aiohttp.ClientError:
        return 0, ""


@pytest.fixture
async def standby(
    kube_cluster: Path, admin_client: rclient.Client, namespace: str, tmp_path: Path
) -> AsyncIterator[tuple[str, ssl.SSLContext, str, str]]:
    """An operator process that does not lead, serving its webhook; yields (url, client TLS context,
    health URL, metrics URL)."""
    now = rfc3339(datetime.datetime.now(datetime.UTC), 6)
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": ELECTION_ID},
        "spec": {
            "holderIdentity": "somebody-else",
            "leaseDurationSeconds": 3600,
            "acquireTime": now,
            "renewTime": now,
        },
    }
    await admin_client.create(resources.LEASE, lease, namespace)
    ca = keypairs.new_ca("standby-test-ca", validity=datetime.timedelta(hours=1))
    pair = keypairs.new_serving(
        ca, dns_names=["localhost"], ip_addresses=["127.0.0.1"], validity=datetime.timedelta(hours=1)
    )
    cert_dir = tmp_path / "certs"
    cert_dir.mkdir()
    (cert_dir / "tls.crt").write_bytes(pair.cert_pem)
    (cert_dir / "tls.key").write_bytes(pair.key_pem)
    hook, health, metrics = ports.free_port(), ports.free_port(), ports.free_port()
    cmd = [
        sys.executable, "-m", "mlops_platform.cli", "run",
        "--kubeconfig", str(kube_cluster),
        "--namespace", namespace,
        "--leader-elect", "--leader-election-namespace", namespace, "--leader-election-id", ELECTION_ID,
        "--no-readiness-requires-leadership",
        "--no-monitoring",
        "--health-probe-bind-address", f"127.0.0.1:{health}",
        "--metrics-bind-address", f"127.0.0.1:{metrics}",
        "--webhook-bind-address", f"127.0.0.1:{hook}",
        "--webhook-cert-dir", str(cert_dir),
    ]  # fmt: skip
    log = tmp_path / "operator.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)  # noqa: ASYNC220
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        yield (
            f"https://127.0.0.1:{hook}/convert",
            context,
            f"http://127.0.0.1:{health}/readyz",
            f"http://127.0.0.1:{metrics}/metrics",
        )
    finally:
        proc.terminate()
        try:
            await asyncio.to_thread(proc.wait, 20)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait)


async def test_a_replica_that_does_not_lead_serves_conversions(
    standby: tuple[str, ssl.SSLContext, str, str], admin_client: rclient.Client, namespace: str
) -> None:
    url, context, readyz, metrics = standby
    obj = isvc.manifest("m", namespace=namespace, modelUri="s3://models/m/1", framework="triton")
    review = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "standby-1", "desiredAPIVersion": "mlops.platform/v1", "objects": [obj]},
    }
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        # ready without leading: caches synced and the webhook serving
        await wait.until(lambda: _ready(session, readyz), timeout=60, what="the standby's /readyz")

        async def answer() -> dict[str, object] | None:
            try:
                async with session.post(
                    url, data=json.dumps(review), headers={"Content-Type": "application/json"}
                ) as r:
                    return await r.json() if r.status == 200 else None
            except aiohttp.ClientError:
                return None

        response = await wait.until(answer, timeout=30, what="a ConversionReview answered by the standby")
        assert response["response"]["uid"] == "standby-1"  # type: ignore[index]
        assert response["response"]["convertedObjects"] == [conversion.convert(obj, "mlops.platform/v1")]  # type: ignore[index]
        status, text = await _get(session, metrics)
        assert status == 200
        assert 'controller_runtime_webhook_requests_total{code="200",webhook="/convert"}' in text
        assert "controller_runtime_webhook_latency_seconds_bucket" in text
    lease = await admin_client.get(resources.LEASE, ELECTION_ID, namespace)
    assert lease["spec"]["holderIdentity"] == "somebody-else"  # it never led
    assert await webhook.ca_bundle(admin_client)  # the session's bundle is untouched


async def _ready(session: aiohttp.ClientSession, url: str) -> bool:
    status, _ = await _get(session, url)
    return status == 200
