"""Certificates of a webhook served over self-managed TLS, and the pure plan of their rotation.

Everything here is pure (no I/O, time passed in): :class:`KeyPair`, :func:`new_ca`,
:func:`new_serving`, :func:`bundle`, :func:`parse_bundle` build and read PEM with ``cryptography``'s
x509 builder (EC P-256 keys, ECDSA-SHA256 signatures), and :func:`plan` decides, from the stored
:class:`CertState` and the time, what the next state is.

Rotation (the invariant: at every instant the serving certificate chains to a CA of the published
bundle, even for consumers that see the bundle or the serving pair up to ``overlap`` late):

1. *steady*: the bundle holds the signing CA ``ca``; ``serving`` is signed by it and is re-issued by
   the same CA once ``renew_at`` of its lifetime has elapsed.
2. *publishing*: once ``renew_at`` of the CA's lifetime has elapsed, a new CA (``next_ca``) joins the
   bundle; the serving certificate stays signed by the old CA.
3. *retiring*: ``overlap`` after the bundle with ``next_ca`` was published, the serving certificate
   is re-issued by ``next_ca``, which becomes ``ca``; the old CA stays in the bundle (``retired_ca``).
4. ``overlap`` later (or at the old CA's expiry, if sooner) the old CA leaves the bundle: steady.

Only an unusable state (none, the signing CA expired, keys not matching their certificates) starts
afresh: a new CA, bundle and serving certificate at once.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import ipaddress
from collections.abc import Iterable, Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertState",
    "Change",
    "KeyPair",
    "Plan",
    "RotationPolicy",
    "bundle",
    "issued_by",
    "new_ca",
    "new_serving",
    "parse_bundle",
    "plan",
    "sans",
]


@dataclasses.dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM (PKCS#8, unencrypted) private key."""

    cert_pem: bytes
    key_pem: bytes

    @functools.cached_property
    def cert(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @functools.cached_property
    def key(self) -> ec.EllipticCurvePrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"expected an EC private key, not {type(key).__name__}")
        return key

    @property
    def not_before(self) -> datetime.datetime:
        return self.cert.not_valid_before_utc

    @property
    def not_after(self) -> datetime.datetime:
        return self.cert.not_valid_after_utc

    def matches(self) -> bool:
        """The key is the certificate's (a pair read from storage may be torn or edited)."""
        try:
            return self.key.public_key() == self.cert.public_key()
        except ValueError:
            return False


def _now(now: datetime.datetime | None) -> datetime.datetime:
    t = now if now is not None else datetime.datetime.now(datetime.UTC)
    if t.tzinfo is None:
        raise ValueError("times must be timezone-aware")
    return t.astimezone(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _window(
    now: datetime.datetime | None, validity: datetime.timedelta, backdate: datetime.timedelta
) -> tuple[datetime.datetime, datetime.datetime]:
    # x509 times have whole seconds: truncate here, so that KeyPair.not_before/not_after are exact
    t = _now(now)
    if validity <= datetime.timedelta(0):
        raise ValueError("validity must be positive")
    return (t - backdate).replace(microsecond=0), (t + validity).replace(microsecond=0)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    window: tuple[datetime.datetime, datetime.datetime],
    *,
    ca: bool,
) -> x509.CertificateBuilder:
    """What a CA and a serving certificate share: names, key, serial, validity, basic constraints,
    key usage (a CA signs certificates; a server only signs its handshakes)."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(window[0])
        .not_valid_after(window[1])
        .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=ca,
                crl_sign=ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


def new_ca(
    common_name: str,
    *,
    validity: datetime.timedelta,
    now: datetime.datetime | None = None,
    backdate: datetime.timedelta = datetime.timedelta(0),
) -> KeyPair:
    """A self-signed CA (EC P-256) that may sign end-entity certificates only (path length 0).

    ``backdate`` moves ``not_before`` back (clock skew between this process and its clients)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    not_before, not_after = _window(now, validity, backdate)
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        _builder(name, name, key, (not_before, not_after), ca=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def new_serving(
    ca: KeyPair,
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    validity: datetime.timedelta,
    now: datetime.datetime | None = None,
    backdate: datetime.timedelta = datetime.timedelta(0),
) -> KeyPair:
    """A TLS server certificate (EC P-256, serverAuth) for the SANs, signed by ``ca``.

    It never outlives ``ca``: ``not_after`` is at most the CA's."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    key = ec.generate_private_key(ec.SECP256R1())
    not_before, not_after = _window(now, validity, backdate)
    not_after = min(not_after, ca.not_after)
    if not_after <= not_before:
        raise ValueError(f"the CA expires at {ca.not_after.isoformat()}: too soon to sign")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    cn = dns_names[0] if dns_names else ip_addresses[0]
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = (
        _builder(subject, ca.cert.subject, key, (not_before, not_after), ca=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def parse_bundle(pem: bytes) -> list[x509.Certificate]:
    """The certificates of a PEM bundle, in order (an empty bundle is an empty list)."""
    if not pem.strip():
        return []
    return x509.load_pem_x509_certificates(pem)


def bundle(*ca_pems: bytes) -> bytes:
    """One PEM bundle of the certificates of ``ca_pems`` (each may hold several), duplicates dropped,
    first occurrences kept in order."""
    seen: set[bytes] = set()
    out: list[bytes] = []
    for pem in ca_pems:
        for cert in parse_bundle(pem):
            der = cert.public_bytes(serialization.Encoding.DER)
            if der not in seen:
                seen.add(der)
                out.append(cert.public_bytes(serialization.Encoding.PEM))
    return b"".join(out)


def issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """``ca`` signed ``cert`` (name and signature checked; not validity or extensions)."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def sans(cert: x509.Certificate) -> tuple[frozenset[str], frozenset[str]]:
    """The (DNS names, IP addresses) of ``cert``'s subjectAltName extension."""
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset(), frozenset()
    ips = frozenset(str(ip) for ip in ext.get_values_for_type(x509.IPAddress))
    return frozenset(ext.get_values_for_type(x509.DNSName)), ips


# -- the rotation planner ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RotationPolicy:
    """How long certificates live and when they are replaced.

    - ``renew_at``: the fraction of a certificate's lifetime after which it is replaced (2/3: a
      30-day serving certificate is re-issued after 20 days; a CA's rotation starts then);
    - ``overlap``: how long a new CA is trusted before it signs, and an old one still trusted after
      it stopped signing. It must exceed the time for every consumer to see a change: the
      replicas' reload period plus the time until clients (the API server) use a new CA bundle;
    - ``backdate``: ``not_before`` is this much before issuance (clients whose clocks lag).
    """

    ca_validity: datetime.timedelta = datetime.timedelta(days=365)
    cert_validity: datetime.timedelta = datetime.timedelta(days=30)
    renew_at: float = 2 / 3
    overlap: datetime.timedelta = datetime.timedelta(hours=1)
    backdate: datetime.timedelta = datetime.timedelta(minutes=5)

    def __post_init__(self) -> None:
        zero = datetime.timedelta(0)
        if not 0 < self.renew_at < 1:
            raise ValueError("renew_at is a fraction of the lifetime, strictly between 0 and 1")
        if self.ca_validity <= zero or self.cert_validity <= zero:
            raise ValueError("validities must be positive")
        if self.overlap < zero or self.backdate < zero:
            raise ValueError("overlap and backdate must not be negative")
        # a CA starts rotating once renew_at of its life elapsed, and no earlier than the retirement of
        # its predecessor (2 overlaps after that one's rotation began); both steps of its own rotation
        # (switch, retire) must then end before it expires
        if self.ca_validity * (1 - self.renew_at) <= 2 * self.overlap or self.ca_validity <= 4 * self.overlap:
            raise ValueError(
                "the CA must outlive its rotation: need ca_validity * (1 - renew_at) > 2 * overlap "
                "and ca_validity > 4 * overlap"
            )

    def renew_time(self, cert: x509.Certificate) -> datetime.datetime:
        """When ``cert`` is due for replacement: ``renew_at`` of its (not backdated) lifetime."""
        not_after = cert.not_valid_after_utc
        start = min(cert.not_valid_before_utc + self.backdate, not_after)
        return start + (not_after - start) * self.renew_at


class Change(enum.Enum):
    """What a plan changed."""

    CREATED = "created"  # a new CA, bundle and serving certificate (no usable state before)
    CA_PUBLISHED = "ca-published"  # a new CA joined the bundle (it does not sign yet)
    CA_SWITCHED = "ca-switched"  # the serving certificate was re-issued by the new CA
    CA_RETIRED = "ca-retired"  # the old CA left the bundle
    SERVING_RENEWED = "serving-renewed"  # the serving certificate was re-issued by the same CA


_SERVING_CHANGES = frozenset({Change.CREATED, Change.CA_SWITCHED, Change.SERVING_RENEWED})


@dataclasses.dataclass(frozen=True)
class CertState:
    """What is stored: the CA signing ``serving``, at most one more CA in the bundle, and when the
    current rotation step began (``next_ca`` published, or the switch away from ``retired_ca``)."""

    ca: KeyPair
    serving: KeyPair
    step_since: datetime.datetime
    next_ca: KeyPair | None = None  # publishing: trusted, not signing yet
    retired_ca: x509.Certificate | None = None  # retiring: trusted, no longer signing

    def __post_init__(self) -> None:
        if self.next_ca is not None and self.retired_ca is not None:
            raise ValueError("a state has at most one CA besides the signing one")

    @property
    def phase(self) -> str:
        """``steady``, ``publishing`` (next_ca trusted, not signing) or ``retiring``."""
        if self.next_ca is not None:
            return "publishing"
        return "retiring" if self.retired_ca is not None else "steady"

    @property
    def bundle(self) -> bytes:
        """The trusted CAs, oldest first."""
        retired = [self.retired_ca.public_bytes(serialization.Encoding.PEM)] if self.retired_ca else []
        nxt = [self.next_ca.cert_pem] if self.next_ca else []
        return bundle(*retired, self.ca.cert_pem, *nxt)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The next state, what changed on the way there, and when to plan again at the latest."""

    state: CertState
    changes: frozenset[Change]
    next_check: datetime.datetime
    bundle_changed: bool  # the trusted CAs differ from the previous state's
    serving_changed: bool  # the serving pair differs from the previous state's


def plan(
    state: CertState | None,
    *,
    now: datetime.datetime,
    policy: RotationPolicy,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    ca_name: str = "webhook-ca",
) -> Plan:
    """The state that should be stored at ``now`` (see the module docstring for the steps).

    At most one step of the CA rotation is taken per call, so consumers see each bundle before the
    serving certificate relies on it; the serving certificate is re-issued when due, when its SANs
    differ from ``dns_names``/``ip_addresses``, or when it is not valid any more."""
    now = _now(now)
    changes: set[Change] = set()
    before = state

    def serving(ca: KeyPair) -> KeyPair:
        return new_serving(
            ca,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
            validity=policy.cert_validity,
            now=now,
            backdate=policy.backdate,
        )

    def fresh_ca() -> KeyPair:
        return new_ca(ca_name, validity=policy.ca_validity, now=now, backdate=policy.backdate)

    if state is None or not _usable(state, now):
        ca = fresh_ca()
        state = CertState(ca=ca, serving=serving(ca), step_since=now)
        changes.add(Change.CREATED)
    elif state.next_ca is not None:
        if now >= state.step_since + policy.overlap or now >= state.ca.not_after:
            old = state.ca.cert
            retired = old if now < old.not_valid_after_utc else None
            state = CertState(
                ca=state.next_ca, serving=serving(state.next_ca), step_since=now, retired_ca=retired
            )
            changes.add(Change.CA_SWITCHED)
    elif state.retired_ca is not None and (
        now >= state.step_since + policy.overlap or now >= state.retired_ca.not_valid_after_utc
    ):
        state = dataclasses.replace(state, retired_ca=None, step_since=now)
        changes.add(Change.CA_RETIRED)

    if state.phase == "steady" and now >= policy.renew_time(state.ca.cert) and Change.CREATED not in changes:
        state = dataclasses.replace(state, next_ca=fresh_ca(), step_since=now)
        changes.add(Change.CA_PUBLISHED)

    if not changes & _SERVING_CHANGES and _serving_stale(state, now, policy, dns_names, ip_addresses):
        state = dataclasses.replace(state, serving=serving(state.ca))
        changes.add(Change.SERVING_RENEWED)

    return Plan(
        state,
        frozenset(changes),
        _next_check(state, policy),
        bundle_changed=before is None or before.bundle != state.bundle,
        serving_changed=before is None or before.serving != state.serving,
    )


def _usable(state: CertState, now: datetime.datetime) -> bool:
    pairs = [state.ca] + ([state.next_ca] if state.next_ca else [])
    if not all(p.matches() for p in pairs):
        return False
    if now < state.ca.not_after:
        return True
    # the signing CA expired: only a still valid next CA can take over (the switch happens at once)
    return state.next_ca is not None and now < state.next_ca.not_after


def _serving_stale(
    state: CertState,
    now: datetime.datetime,
    policy: RotationPolicy,
    dns_names: Iterable[str],
    ip_addresses: Iterable[str],
) -> bool:
    cert = state.serving.cert
    wanted = (frozenset(dns_names), frozenset(str(ipaddress.ip_address(a)) for a in ip_addresses))
    return (
        now >= policy.renew_time(cert)
        or not state.serving.matches()
        or not issued_by(cert, state.ca.cert)
        or sans(cert) != wanted
    )


def _next_check(state: CertState, policy: RotationPolicy) -> datetime.datetime:
    times = [policy.renew_time(state.serving.cert)]
    if state.next_ca is not None:
        times += [state.step_since + policy.overlap, state.ca.not_after]
    elif state.retired_ca is not None:
        times += [state.step_since + policy.overlap, state.retired_ca.not_valid_after_utc]
    else:
        times.append(policy.renew_time(state.ca.cert))
    return min(times)
