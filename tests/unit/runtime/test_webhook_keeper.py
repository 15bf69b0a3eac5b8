"""The certificate keeper on a fake API (the Secret's format, the order of inject and write, a
lost race), the mounted-files source, and the CRD caBundle injector (no write when equal)."""

from __future__ import annotations

import base64
import copy
import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.webhook import certs, keeper, keypairs
from mlops_platform.testing import fakes

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
POLICY = certs.RotationPolicy(
    ca_validity=dt.timedelta(seconds=120),
    cert_validity=dt.timedelta(seconds=30),
    overlap=dt.timedelta(seconds=10),
    backdate=dt.timedelta(0),
)
NS, NAME = "hooks", "hooks-tls"


@dataclasses.dataclass
class Now:
    t: dt.datetime = T0

    def __call__(self) -> dt.datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += dt.timedelta(seconds=seconds)


class World:
    """A keeper on a FakeClient; records what was injected and served, and what the Secret held
    at each injection."""

    def __init__(self) -> None:
        self.client = fakes.FakeClient()
        self.now = Now()
        self.injected: list[tuple[bytes, bytes | None]] = []  # (bundle, the stored bundle then)
        self.served: list[tuple[bytes, bytes]] = []
        self.keeper = self.new_keeper()

    def new_keeper(self) -> keeper.CertKeeper:
        return keeper.CertKeeper(
            self.client,
            NS,
            NAME,
            dns_names=("hooks.hooks.svc",),
            ip_addresses=("127.0.0.1",),
            inject=self.inject,
            on_serving=self.on_serving,
            policy=POLICY,
            period=1.0,
            now=self.now,
        )

    async def inject(self, bundle: bytes) -> None:
        self.injected.append((bundle, self.stored_bundle()))

    def on_serving(self, cert_pem: bytes, key_pem: bytes) -> None:
        self.served.append((cert_pem, key_pem))

    def secret(self) -> fakes.JSON | None:
        return self.client.stored(resources.SECRET, NS, NAME)

    def stored_bundle(self) -> bytes | None:
        secret = self.secret()
        return base64.b64decode(secret["data"][keeper.BUNDLE]) if secret else None


async def test_the_first_pass_creates_the_secret_then_injects_and_serves() -> None:
    w = World()
    await w.keeper.reconcile()
    secret = w.secret()
    assert secret is not None and secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"ca.crt", "ca.key", "tls.crt", "tls.key", "ca-bundle.crt"}
    assert secret["metadata"]["annotations"][keeper.PHASE_ANNOTATION] == "steady"
    state = keeper.decode_state(secret)
    assert state is not None and state.step_since == T0
    assert w.injected == [(state.bundle, state.bundle)]  # stored first, then injected
    assert w.served == [(state.serving.cert_pem, state.serving.key_pem)]
    assert w.keeper.ready.is_set() and w.keeper.writes == 1

    await w.keeper.reconcile()  # nothing due: no write, the bundle re-asserted, no new serving pair
    assert w.keeper.writes == 1 and len(w.injected) == 2 and len(w.served) == 1


async def test_a_new_ca_is_injected_before_it_is_stored_and_the_switch_stored_before_served() -> None:
    w = World()
    await w.keeper.reconcile()
    first = keeper.decode_state(w.secret() or {})
    assert first is not None
    w.now.advance(80)  # 2/3 of the CA's life
    w.injected.clear()
    await w.keeper.reconcile()
    publishing = keeper.decode_state(w.secret() or {})
    assert publishing is not None and publishing.phase == "publishing"
    assert set((w.secret() or {})["data"]) >= {"next-ca.crt", "next-ca.key"}
    # the stored bundle re-asserted, then the new one injected while the Secret still had the old
    assert w.injected == [(first.bundle, first.bundle), (publishing.bundle, first.bundle)]
    assert w.served[-1][0] == publishing.serving.cert_pem  # renewed by the old CA (due at 80 s as well)
    assert keypairs.issued_by(publishing.serving.cert, first.ca.cert)

    w.now.advance(10)  # the overlap elapsed: the serving certificate comes from the new CA
    await w.keeper.reconcile()
    retiring = keeper.decode_state(w.secret() or {})
    assert retiring is not None and retiring.phase == "retiring"
    assert publishing.next_ca is not None and retiring.ca == publishing.next_ca
    assert retiring.retired_ca == first.ca.cert and retiring.bundle == publishing.bundle
    assert "next-ca.crt" not in (w.secret() or {})["data"]
    assert w.served[-1][0] == retiring.serving.cert_pem

    w.now.advance(10)
    await w.keeper.reconcile()
    steady = keeper.decode_state(w.secret() or {})
    assert steady is not None and steady.phase == "steady" and steady.retired_ca is None
    assert keypairs.parse_bundle(steady.bundle) == [retiring.ca.cert]
    assert w.injected[-1] == (steady.bundle, retiring.bundle)  # dropped from trust before it is stored


async def test_a_lost_race_is_planned_again_from_the_winners_state() -> None:
    w = World()
    await w.keeper.reconcile()
    w.now.advance(20)  # the serving certificate is due
    before = keeper.decode_state(w.secret() or {})
    assert before is not None
    # another replica renews first: our replace fails with a 409, then we read its state
    original_get = w.client.get
    calls = 0
    others: list[certs.CertState] = []

    async def get_then_other_writes(
        res: rclient.Resource, name: str, namespace: str | None = None
    ) -> fakes.JSON:
        nonlocal calls
        calls += 1
        obj = await original_get(res, name, namespace)
        if calls == 1:  # the other replica's write lands between our read and our write
            other = certs.plan(
                before,
                now=w.now(),
                policy=POLICY,
                dns_names=("hooks.hooks.svc",),
                ip_addresses=("127.0.0.1",),
            )
            others.append(other.state)
            data, annotations = keeper.encode_state(other.state)
            stored = copy.deepcopy(obj)
            stored["data"], stored["metadata"]["annotations"] = data, annotations
            await w.client.replace(resources.SECRET, stored)
            w.client.fail("replace", "secrets", NAME, status=409, times=1)  # our resourceVersion is old
        return obj

    w.client.get = get_then_other_writes  # type: ignore[method-assign]
    await w.keeper.reconcile()
    final = keeper.decode_state(w.secret() or {})
    assert final is not None and w.keeper.conflicts == 1
    assert final == others[0] and w.keeper.state == final  # the before's state, ours never stored
    assert w.served[-1][0] == final.serving.cert_pem


async def test_an_unreadable_secret_is_replaced_and_other_keys_kept() -> None:
    w = World()
    await w.client.create(
        resources.SECRET,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": NAME, "namespace": NS, "annotations": {keeper.STEP_SINCE_ANNOTATION: "x"}},
            "data": {"ca.crt": base64.b64encode(b"junk").decode(), "extra": "eA=="},
        },
    )
    assert keeper.decode_state(w.secret() or {}) is None
    await w.keeper.reconcile()
    secret = w.secret() or {}
    assert keeper.decode_state(secret) is not None and secret["data"]["extra"] == "eA=="


def test_the_period_must_be_shorter_than_the_overlap_and_the_renewal_margin() -> None:
    with pytest.raises(ValueError, match="period"):
        keeper.CertKeeper(fakes.FakeClient(), NS, NAME, dns_names=("a",), policy=POLICY, period=10.0)


def write_pair(directory: Path, pair: keypairs.KeyPair, key: bytes | None = None) -> None:
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(key if key is not None else pair.key_pem)


async def test_files_are_served_when_they_change_and_a_torn_pair_is_skipped(tmp_path: Path) -> None:
    served: list[bytes] = []

    async def on_serving(cert_pem: bytes, key_pem: bytes) -> None:
        served.append(cert_pem)

    source = keeper.FileCertSource(tmp_path, on_serving=on_serving, period=0.1)
    assert not await source.reload() and not source.ready.is_set()  # nothing mounted yet
    ca = keypairs.new_ca("cm-ca", validity=dt.timedelta(hours=1))
    a, b = (
        keypairs.new_serving(ca, dns_names=("hooks.svc",), validity=dt.timedelta(hours=1)) for _ in range(2)
    )
    write_pair(tmp_path, a)
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    assert await source.reload() and source.ready.is_set() and source.ca_pem == ca.cert_pem
    assert not await source.reload()  # unchanged
    write_pair(tmp_path, b, key=a.key_pem)  # the certificate updated, the key not yet
    assert not await source.reload()
    write_pair(tmp_path, b)
    assert await source.reload()
    assert served == [a.cert_pem, b.cert_pem]


def crd(strategy: str = "Webhook", ca_bundle: str | None = None) -> fakes.JSON:
    conversion: fakes.JSON = {"strategy": strategy}
    if strategy == "Webhook":
        conversion["webhook"] = {"clientConfig": {"url": "https://127.0.0.1:1/convert"}}
        if ca_bundle is not None:
            conversion["webhook"]["clientConfig"]["caBundle"] = ca_bundle
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.test"},
        "spec": {"conversion": conversion},
    }


async def test_the_crd_ca_bundle_is_patched_only_when_it_differs() -> None:
    client = fakes.FakeClient()
    await client.create(resources.CRD, crd())
    assert await keeper.patch_crd_ca_bundle(client, "widgets.example.test", b"PEM")
    [patch] = [c for c in client.calls if c.verb == "patch"]
    assert patch.body == {"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": "UEVN"}}}}}

    client = fakes.FakeClient()
    await client.create(resources.CRD, crd(ca_bundle="UEVN"))
    assert not await keeper.patch_crd_ca_bundle(client, "widgets.example.test", b"PEM")
    assert [c.verb for c in client.calls] == ["create", "get"]

    client = fakes.FakeClient()
    await client.create(resources.CRD, crd(strategy="None"))
    with pytest.raises(ValueError, match="webhook"):
        await keeper.patch_crd_ca_bundle(client, "widgets.example.test", b"PEM")
