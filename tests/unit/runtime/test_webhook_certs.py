"""Webhook certificates and their rotation plan: chains verified with cryptography's x509 verifier,
the rotation steps over simulated time, and a property: with consumers that see every change up to
a bound late, the serving certificate always chains to the bundle and is valid."""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import itertools
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509 import DNSName, IPAddress
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError
from hypothesis import given, settings
from hypothesis import strategies as st

from mlops_platform.runtime.webhook import certs, keypairs
from mlops_platform.runtime.webhook.certs import Change

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
DNS = ("hooks.ns.svc", "hooks.ns.svc.cluster.local")
IPS = ("127.0.0.1",)
LOOPBACK = IPAddress(ipaddress.ip_address("127.0.0.1"))


def s(seconds: float) -> dt.timedelta:
    return dt.timedelta(seconds=seconds)


def chains(
    serving: keypairs.KeyPair, bundle: bytes, at: dt.datetime, subject: DNSName | IPAddress = LOOPBACK
) -> bool:
    """``serving`` verifies as a TLS server certificate for ``subject`` against ``bundle`` at ``at``."""
    verifier = (
        PolicyBuilder().store(Store(keypairs.parse_bundle(bundle))).time(at).build_server_verifier(subject)
    )
    try:
        verifier.verify(serving.cert, [])
    except VerificationError:
        return False
    return True


def test_a_serving_certificate_chains_to_its_ca_for_its_names_only() -> None:
    ca = keypairs.new_ca("test-ca", validity=dt.timedelta(days=1), now=T0)
    serving = keypairs.new_serving(
        ca, dns_names=DNS, ip_addresses=IPS, validity=dt.timedelta(hours=1), now=T0
    )
    assert serving.matches() and ca.matches()
    assert (ca.not_before, ca.not_after) == (T0, T0 + dt.timedelta(days=1))
    assert (serving.not_before, serving.not_after) == (T0, T0 + dt.timedelta(hours=1))
    assert chains(serving, ca.cert_pem, T0 + s(1))
    assert chains(serving, ca.cert_pem, T0 + s(1), DNSName("hooks.ns.svc.cluster.local"))
    assert not chains(serving, ca.cert_pem, T0 + s(1), DNSName("other.ns.svc"))
    assert not chains(serving, ca.cert_pem, T0 + dt.timedelta(hours=2))  # expired
    other = keypairs.new_ca("other-ca", validity=dt.timedelta(days=1), now=T0)
    assert not chains(serving, other.cert_pem, T0 + s(1))
    assert chains(serving, keypairs.bundle(other.cert_pem, ca.cert_pem), T0 + s(1))

    assert keypairs.sans(serving.cert) == (frozenset(DNS), frozenset(IPS))
    eku = serving.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    constraints = ca.cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    assert ca.cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert keypairs.issued_by(serving.cert, ca.cert) and not keypairs.issued_by(serving.cert, other.cert)


def test_a_serving_certificate_never_outlives_its_ca_and_backdating_moves_not_before() -> None:
    ca = keypairs.new_ca("ca", validity=s(100), now=T0)
    serving = keypairs.new_serving(
        ca, ip_addresses=IPS, dns_names=(), validity=s(1000), now=T0 + s(50), backdate=s(5)
    )
    assert serving.not_after == ca.not_after
    assert serving.not_before == T0 + s(45)
    with pytest.raises(ValueError, match="too soon"):
        keypairs.new_serving(ca, dns_names=DNS, validity=s(10), now=T0 + s(100))
    with pytest.raises(ValueError, match="at least one"):
        keypairs.new_serving(ca, dns_names=(), validity=s(10), now=T0)


def test_bundles_concatenate_without_duplicates_in_order() -> None:
    a, b, c = (keypairs.new_ca(n, validity=s(100), now=T0) for n in "abc")
    both = keypairs.bundle(b.cert_pem, a.cert_pem)
    merged = keypairs.bundle(both, c.cert_pem, a.cert_pem, b"")
    assert [x.subject for x in keypairs.parse_bundle(merged)] == [x.cert.subject for x in (b, a, c)]
    assert keypairs.parse_bundle(b"") == [] and keypairs.bundle() == b""


def test_a_key_that_is_not_the_certificates_does_not_match() -> None:
    a, b = (keypairs.new_ca(n, validity=s(100), now=T0) for n in "ab")
    assert not keypairs.KeyPair(a.cert_pem, b.key_pem).matches()
    assert not keypairs.KeyPair(a.cert_pem, b"garbage").matches()


POLICY = certs.RotationPolicy(
    ca_validity=s(120), cert_validity=s(30), renew_at=2 / 3, overlap=s(10), backdate=s(0)
)


def plan(state: certs.CertState | None, at: dt.datetime) -> certs.Plan:
    return certs.plan(state, now=at, policy=POLICY, dns_names=DNS, ip_addresses=IPS)


def test_the_rotation_steps_over_simulated_time() -> None:
    first = plan(None, T0)
    assert first.changes == {Change.CREATED} and first.bundle_changed and first.serving_changed
    st0 = first.state
    assert st0.phase == "steady" and chains(st0.serving, st0.bundle, T0)
    assert first.next_check == T0 + s(20)  # the serving certificate's renewal, before the CA's (80 s)

    idle = plan(st0, T0 + s(19))
    assert idle.changes == set() and idle.state == st0 and not idle.bundle_changed

    renewed = plan(st0, T0 + s(20))  # 2/3 of the serving certificate's life: same CA, new certificate
    assert renewed.changes == {Change.SERVING_RENEWED} and not renewed.bundle_changed
    assert renewed.state.ca == st0.ca and renewed.state.serving != st0.serving

    state = renewed.state
    for t in (45, 65):
        state = plan(state, T0 + s(t)).state
    assert state.serving.not_after == T0 + s(95)

    published = plan(state, T0 + s(80))  # 2/3 of the CA's life: a new CA joins the bundle, does not sign
    assert published.changes == {Change.CA_PUBLISHED} and published.bundle_changed
    assert not published.serving_changed
    p = published.state
    assert p.phase == "publishing" and p.next_ca is not None and p.step_since == T0 + s(80)
    assert p.serving == state.serving
    assert len(keypairs.parse_bundle(p.bundle)) == 2
    assert published.next_check == T0 + s(85)  # the serving renewal, before the overlap's end (90 s)

    during = plan(p, T0 + s(85))  # renewed within the overlap: by the old CA still
    assert during.changes == {Change.SERVING_RENEWED} and not during.bundle_changed
    assert keypairs.issued_by(during.state.serving.cert, state.ca.cert)
    p = during.state
    assert during.next_check == T0 + s(90)

    assert plan(p, T0 + s(89)).changes == set()  # still within the overlap
    switched = plan(p, T0 + s(90))
    assert (
        switched.changes == {Change.CA_SWITCHED} and switched.serving_changed and not switched.bundle_changed
    )
    w = switched.state
    assert w.phase == "retiring" and w.ca == p.next_ca and w.retired_ca == state.ca.cert
    assert keypairs.issued_by(w.serving.cert, p.next_ca.cert) and w.bundle == p.bundle
    assert switched.next_check == T0 + s(100)

    assert plan(w, T0 + s(99)).changes == set()
    retired = plan(w, T0 + s(100))
    assert retired.changes == {Change.CA_RETIRED} and retired.bundle_changed and not retired.serving_changed
    assert retired.state.phase == "steady" and keypairs.parse_bundle(retired.state.bundle) == [p.next_ca.cert]
    assert chains(retired.state.serving, retired.state.bundle, T0 + s(100))


def test_a_retired_ca_leaves_at_its_expiry_if_sooner_than_the_overlap() -> None:
    ca = keypairs.new_ca("old", validity=s(120), now=T0)
    new = keypairs.new_ca("new", validity=s(120), now=T0 + s(100))
    serving = keypairs.new_serving(new, dns_names=DNS, ip_addresses=IPS, validity=s(30), now=T0 + s(110))
    state = certs.CertState(ca=new, serving=serving, step_since=T0 + s(115), retired_ca=ca.cert)
    assert plan(state, T0 + s(119)).changes == set()
    assert plan(state, T0 + s(120)).changes == {Change.CA_RETIRED}


def test_an_unusable_state_starts_afresh_and_changed_names_reissue() -> None:
    state = plan(None, T0).state
    expired = plan(state, T0 + s(121))
    assert expired.changes == {Change.CREATED} and expired.state.ca != state.ca
    torn = dataclasses.replace(state, ca=keypairs.KeyPair(state.ca.cert_pem, state.serving.key_pem))
    assert plan(torn, T0 + s(1)).changes == {Change.CREATED}

    renamed = certs.plan(state, now=T0 + s(1), policy=POLICY, dns_names=("new.ns.svc",), ip_addresses=IPS)
    assert renamed.changes == {Change.SERVING_RENEWED} and renamed.state.ca == state.ca
    assert keypairs.sans(renamed.state.serving.cert)[0] == {"new.ns.svc"}

    foreign = keypairs.new_ca("foreign", validity=s(120), now=T0)
    stray = dataclasses.replace(
        state, serving=keypairs.new_serving(foreign, dns_names=DNS, ip_addresses=IPS, validity=s(30), now=T0)
    )
    fixed = plan(stray, T0 + s(1))
    assert fixed.changes == {Change.SERVING_RENEWED} and keypairs.issued_by(
        fixed.state.serving.cert, state.ca.cert
    )


def test_a_signing_ca_that_expired_while_publishing_hands_over_at_once() -> None:
    state = plan(None, T0).state
    publishing = plan(plan(state, T0 + s(60)).state, T0 + s(80)).state
    assert publishing.phase == "publishing"
    late = plan(publishing, T0 + s(125))  # nobody planned for 45 s: the old CA expired meanwhile
    assert late.changes == {Change.CA_SWITCHED} and late.bundle_changed
    assert late.state.phase == "steady" and late.state.ca == publishing.next_ca


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"renew_at": 1.0}, "strictly between"),
        ({"cert_validity": s(0)}, "positive"),
        ({"overlap": s(-1)}, "not be negative"),
        ({"ca_validity": s(60), "overlap": s(10)}, "outlive"),  # (1 - 2/3) * 60 = 20 <= 2 * 10
        ({"ca_validity": s(100), "renew_at": 0.1, "overlap": s(30)}, "outlive"),  # 100 <= 4 * 30
    ],
)
def test_a_policy_the_ca_cannot_outlive_is_refused(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(POLICY, **kw)


@dataclasses.dataclass
class Published:
    """What was stored, in order: (time, bundle, serving)."""

    history: list[tuple[dt.datetime, bytes, keypairs.KeyPair]] = dataclasses.field(default_factory=list)

    def live(self, at: dt.datetime, lag: dt.timedelta) -> list[tuple[bytes, keypairs.KeyPair]]:
        """What a consumer may still use at ``at``: the versions stored in ``(at - lag, at]`` and the
        last one before that."""
        past = [h for h in self.history if h[0] <= at]
        recent = [h for h in past if h[0] > at - lag]
        older = [h for h in past if h[0] <= at - lag][-1:]
        return [(b, sv) for _, b, sv in older + recent]


@settings(max_examples=12, deadline=None)
@given(
    renew_at=st.floats(0.5, 0.75),
    overlap=st.floats(3.0, 12.0),
    backdate=st.sampled_from([0.0, 5.0]),
    steps=st.lists(st.floats(0.5, 2.0), min_size=1, max_size=50),
)
def test_consumers_lagging_less_than_the_overlap_always_have_a_chain(
    renew_at: float, overlap: float, backdate: float, steps: list[float]
) -> None:
    """A keeper plans at least every 2 s (``steps``, repeated for 300 s); the API server sees each
    bundle, and each replica each serving pair, up to ``lag`` (2 s, within the overlap) late. At every
    plan time and just before the next, every serving pair a replica may use chains to every bundle
    the server may use, and is valid."""
    policy = certs.RotationPolicy(
        ca_validity=s(120), cert_validity=s(30), renew_at=renew_at, overlap=s(overlap), backdate=s(backdate)
    )
    lag = s(2.0)
    published = Published()
    state: certs.CertState | None = None
    t = T0
    cas: set[bytes] = set()
    renewals = 0
    for step in itertools.islice(itertools.cycle(steps), 100_000):
        if t - T0 > s(300):
            break
        p = certs.plan(state, now=t, policy=policy, dns_names=DNS, ip_addresses=IPS)
        assert len(p.changes - {Change.SERVING_RENEWED}) <= 1  # one CA step at a time
        assert len(keypairs.parse_bundle(p.state.bundle)) <= 2
        assert p.next_check > t
        state = p.state
        if p.changes:
            published.history.append((t, state.bundle, state.serving))
        cas.add(state.ca.cert_pem)
        renewals += Change.SERVING_RENEWED in p.changes
        for at in (t, t + s(step) - dt.timedelta(microseconds=1)):
            for bundle, serving in published.live(at, lag):
                for _, other_serving in published.live(at, lag):
                    assert chains(other_serving, bundle, at), (at - T0, state.phase)
                assert serving.not_before <= at < serving.not_after
        t += s(step)
    assert len(cas) >= 2 and renewals >= 5  # the CA rotated, the serving certificate renewed often
