"""Key pairs of a webhook served over self-managed TLS (the certificates :mod:`.certs` rotates):
build and read PEM with ``cryptography``'s x509 builder.

Contract: pure (no I/O; time passed in, timezone-aware, or now). Keys are EC P-256 and signatures
ECDSA-SHA256; x509 times are whole seconds, so :attr:`KeyPair.not_before`/``not_after`` are exactly
what was asked (truncated). :func:`new_ca` is a self-signed CA that signs end-entity certificates
only (path length 0); :func:`new_serving` a serverAuth certificate for its SANs that never outlives
its CA. :func:`bundle` joins PEM bundles without duplicates, first occurrences first;
:func:`issued_by` checks name and signature only (not validity or extensions).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["KeyPair", "bundle", "issued_by", "new_ca", "new_serving", "parse_bundle", "sans", "utc"]


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


def utc(now: datetime.datetime | None) -> datetime.datetime:
    """``now`` (default: the current time) in UTC; a naive time is a ValueError."""
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
    t = utc(now)
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
