"""A CRD conversion webhook served by WebhookServer with CertKeeper's certificates, called by the
real kube-apiserver over verified TLS: objects created in v2 read in v1 and v2, replicas racing for
one Secret agree on one CA, and a CA rotation (seconds-long certificates) under steady traffic in
the non-storage version fails no request."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime as dt
import uuid
from collections.abc import AsyncIterator

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from mlops_platform.runtime.transport import apiextensions, resources
from mlops_platform.runtime.transport.client import JSON, ApiError, Client, Resource, TransportError
from mlops_platform.runtime.webhook import certs, keeper, keypairs, server
from mlops_platform.testing import crds, wait

FIELD_MANAGER = "webhook-conversion-test"
SECRET = "widgets-webhook-tls"
LOOPBACK = ("127.0.0.1",)


def schema(spec: JSON) -> JSON:
    return {
        "openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": spec}}}
    }


def crd_manifest(group: str, url: str) -> JSON:
    size = {"type": "integer"}
    versions = [
        {"name": "v1", "served": True, "storage": True, "schema": schema({"size": size})},
        {
            "name": "v2",
            "served": True,
            "storage": False,
            "schema": schema({"dimensions": {"type": "object", "properties": {"size": size}}}),
        },
    ]
    conversion = {
        "strategy": "Webhook",
        "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"url": url}},
    }
    return crds.widget_crd(group, versions, conversion)


def convert(obj: JSON, desired: str) -> JSON:
    """v1 ``spec.size`` <-> v2 ``spec.dimensions.size`` (the trivial converter under test)."""
    out = {**obj, "apiVersion": desired}
    spec = dict(obj.get("spec") or {})
    if desired.endswith("/v2") and "size" in spec:
        spec["dimensions"] = {"size": spec.pop("size")}
    elif desired.endswith("/v1") and "dimensions" in spec:
        spec["size"] = spec.pop("dimensions").get("size")
    out["spec"] = spec
    return out


@dataclasses.dataclass
class Converter:
    calls: int = 0

    async def __call__(self, body: bytes) -> bytes:
        self.calls += 1
        review = msgspec.json.decode(body)
        request = review["request"]
        objects = [convert(o, request["desiredAPIVersion"]) for o in request["objects"]]
        response = {"uid": request["uid"], "convertedObjects": objects, "result": {"status": "Success"}}
        return msgspec.json.encode(
            {"apiVersion": review["apiVersion"], "kind": "ConversionReview", "response": response}
        )


@dataclasses.dataclass
class Replica:
    """One operator replica: a certificate keeper feeding a webhook server."""

    keeper: keeper.CertKeeper
    server: server.WebhookServer
    registry: CollectorRegistry
    task: asyncio.Task[None] | None = None
    served: list[bytes] = dataclasses.field(default_factory=list)  # its serving certificates, in order

    def start(self) -> None:
        self.task = asyncio.create_task(self.keeper.run())

    def on_serving(self, cert_pem: bytes, key_pem: bytes) -> None:
        self.server.set_certificate(cert_pem, key_pem)
        self.served.append(cert_pem)


@dataclasses.dataclass
class Setup:
    client: Client
    namespace: str
    crd_name: str
    v1: Resource
    v2: Resource
    converter: Converter
    primary: server.WebhookServer  # the server the CRD's webhook URL points at
    primary_registry: CollectorRegistry
    replicas: list[Replica] = dataclasses.field(default_factory=list)

    def replica(
        self, *, primary: bool = False, policy: certs.RotationPolicy | None = None, period: float = 5.0
    ) -> Replica:
        """A replica (not started) on the primary server, or on a server of its own."""
        if primary:
            srv, registry = self.primary, self.primary_registry
        else:
            registry = CollectorRegistry()
            srv = server.WebhookServer({"/convert": self.converter}, registry=registry)

        async def inject(bundle: bytes) -> None:
            await keeper.patch_crd_ca_bundle(self.client, self.crd_name, bundle)

        kp = keeper.CertKeeper(
            self.client,
            self.namespace,
            SECRET,
            dns_names=(),
            ip_addresses=LOOPBACK,
            inject=inject,
            policy=policy,
            period=period,
        )
        replica = Replica(kp, srv, registry)
        kp.on_serving = replica.on_serving
        self.replicas.append(replica)
        return replica

    def widget(self, name: str, size: int) -> JSON:
        return {
            "apiVersion": self.v2.api_version,
            "kind": "Widget",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"dimensions": {"size": size}},
        }

    async def stored_ca(self) -> bytes:
        secret = await self.client.get(resources.SECRET, SECRET, self.namespace)
        return base64.b64decode(secret["data"]["ca.crt"])


@pytest.fixture
async def setup(admin_client: Client, namespace: str) -> AsyncIterator[Setup]:
    group = f"w{uuid.uuid4().hex[:8]}.webhook.test"
    converter = Converter()
    registry = CollectorRegistry()
    primary = server.WebhookServer({"/convert": converter}, registry=registry)
    await primary.start()
    manifest = crd_manifest(group, primary.url("/convert"))
    await apiextensions.install(admin_client, [manifest], field_manager=FIELD_MANAGER)
    v1, v2 = (Resource(group, v, "widgets", "Widget") for v in ("v1", "v2"))
    s = Setup(admin_client, namespace, manifest["metadata"]["name"], v1, v2, converter, primary, registry)
    try:
        yield s
    finally:
        for r in s.replicas:
            if r.task is not None:
                r.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await r.task
        servers = {id(r.server): r.server for r in s.replicas} | {id(primary): primary}
        for srv in servers.values():
            await srv.stop()
        await apiextensions.uninstall(admin_client, [s.crd_name])


async def test_the_api_server_converts_through_the_webhook_over_verified_tls(setup: Setup) -> None:
    c, ns = setup.client, setup.namespace
    # before the keeper runs: a certificate from a CA the API server was not given is refused
    stray_ca = keypairs.new_ca("stray", validity=dt.timedelta(hours=1))
    stray = keypairs.new_serving(
        stray_ca, dns_names=(), ip_addresses=LOOPBACK, validity=dt.timedelta(hours=1)
    )
    replica = setup.replica(primary=True)
    replica.server.set_certificate(stray.cert_pem, stray.key_pem)
    with pytest.raises(ApiError) as refused:
        await c.create(setup.v2, setup.widget("early", 1), ns)
    assert "x509" in refused.value.message or "certificate" in refused.value.message
    assert setup.converter.calls == 0

    replica.start()
    await asyncio.wait_for(replica.keeper.ready.wait(), 30)
    crd = await c.get(resources.CRD, setup.crd_name)
    bundle = base64.b64decode(crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"])
    assert bundle == (replica.keeper.state.bundle if replica.keeper.state else None)

    async def create() -> JSON:  # the API server uses the new caBundle once it saw the CRD change
        try:
            return await c.create(setup.v2, setup.widget("widget", 7), ns)
        except ApiError as e:
            if e.conflict:
                return await c.get(setup.v2, "widget", ns)
            raise

    created = await wait.until(create, timeout=30, what="a create in v2 through the webhook")
    assert created["spec"] == {"dimensions": {"size": 7}}
    assert (await c.get(setup.v1, "widget", ns))["spec"] == {"size": 7}
    assert (await c.get(setup.v2, "widget", ns))["spec"] == {"dimensions": {"size": 7}}
    [item] = (await c.list(setup.v1, ns))["items"]
    assert item["apiVersion"] == setup.v1.api_version and item["spec"] == {"size": 7}
    assert setup.converter.calls >= 3
    total = "controller_runtime_webhook_requests_total"
    assert (setup.primary_registry.get_sample_value(total, {"webhook": "/convert", "code": "200"}) or 0) >= 3


async def test_replicas_racing_for_the_secret_agree_on_one_ca(setup: Setup) -> None:
    replicas = [setup.replica() for _ in range(3)]
    for r in replicas:  # the run loops start at once: each reads "no Secret" and plans a new CA
        r.start()
    for r in replicas:
        await asyncio.wait_for(r.keeper.ready.wait(), 30)
    states = [r.keeper.state for r in replicas]
    assert all(s is not None and s == states[0] for s in states)
    assert sum(r.keeper.writes for r in replicas) == 1  # one create won; the others re-read it
    assert states[0] is not None and await setup.stored_ca() == states[0].ca.cert_pem
    assert all(r.server.certificate == states[0].serving for r in replicas)


FAST = certs.RotationPolicy(
    ca_validity=dt.timedelta(seconds=12),
    cert_validity=dt.timedelta(seconds=3),
    renew_at=2 / 3,
    overlap=dt.timedelta(seconds=1.5),
    backdate=dt.timedelta(0),
)


async def test_a_ca_rotation_under_traffic_fails_no_request(setup: Setup) -> None:
    c, ns = setup.client, setup.namespace
    served = setup.replica(primary=True, policy=FAST, period=0.25)  # the one the CRD points at
    other = setup.replica(policy=FAST, period=0.25)  # another replica, writing the same Secret
    await other.server.start()
    served.start()
    other.start()
    await asyncio.wait_for(served.keeper.ready.wait(), 30)
    await asyncio.wait_for(other.keeper.ready.wait(), 30)
    first_ca = await setup.stored_ca()

    async def ready() -> bool:
        try:
            await c.create(setup.v2, setup.widget("probe", 0), ns)
        except ApiError as e:
            if not e.conflict:
                raise
        return True

    await wait.until(ready, timeout=30, what="conversion through the webhook")

    failures: list[str] = []
    ops = 0
    stop = asyncio.Event()

    async def traffic() -> None:
        nonlocal ops
        i = 0
        while not stop.is_set():
            name = f"w-{i}"
            try:
                await c.create(setup.v2, setup.widget(name, i), ns)
                got = await c.get(setup.v2, name, ns)
                assert got["spec"] == {"dimensions": {"size": i}}
                assert (await c.get(setup.v1, name, ns))["spec"] == {"size": i}
                got["spec"]["dimensions"]["size"] = i + 1000
                await c.replace(setup.v2, got)
                await c.list(setup.v2, ns, limit=20)
                ops += 5
            except (ApiError, TransportError) as e:
                failures.append(f"{type(e).__name__}: {e}")
            i += 1

    cas: set[bytes] = {first_ca}

    async def rotated_twice() -> bool:
        cas.add(await setup.stored_ca())
        steady_again = served.keeper.state is not None and served.keeper.state.phase == "steady"
        return len(cas) >= 3 and steady_again

    worker = asyncio.create_task(traffic())
    try:
        await wait.until(rotated_twice, timeout=90, interval=0.1, what="two CA rotations")
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)

    assert failures == []
    assert len(set(served.served)) >= 6  # the serving certificate changed many times
    assert ops >= 100
    codes = {
        s.labels["code"]: s.value
        for m in setup.primary_registry.collect()
        if m.name == "controller_runtime_webhook_requests"
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert set(codes) == {"200"} and codes["200"] > 0
