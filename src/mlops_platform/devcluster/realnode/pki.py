"""A real node's credentials: client certificates signed by the local cluster's CA (the one kwokctl
made), the way a kubeadm join ends up: ``system:node:<name>`` in ``system:nodes`` for the kubelet (the
Node authorizer and NodeRestriction admission apply to it), ``system:kube-proxy`` for kube-proxy
(bound to ``system:node-proxier`` by the API server's default RBAC), ``mlops:kube-router`` for the
NetworkPolicy agent."""

from __future__ import annotations

import dataclasses
import datetime
import warnings
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mlops_platform.devcluster.realnode import configs

VALIDITY = datetime.timedelta(days=365)


@dataclasses.dataclass(frozen=True)
class Identity:
    """Who a component is to the API server."""

    file: str  # its files' stem in the node's pki directory
    user: str  # the certificate's CN
    groups: tuple[str, ...] = ()


def kubelet(node_name: str) -> Identity:
    return Identity("kubelet", f"system:node:{node_name}", ("system:nodes",))


KUBE_PROXY = Identity("kube-proxy", "system:kube-proxy")
#: the NetworkPolicy agent: bound to a read-only ClusterRole (addons, manifests/kube-router.yaml)
KUBE_ROUTER = Identity("kube-router", "mlops:kube-router")


def client_certificate(ca_cert_pem: bytes, ca_key_pem: bytes, who: Identity) -> tuple[bytes, bytes]:
    """A client certificate (EC P-256, clientAuth) for ``who``, signed by the CA; PEM cert and key."""
    with warnings.catch_warnings():
        # kwokctl's CA has a serial number that is not positive (RFC 5280 wants one): read all the same
        warnings.simplefilter("ignore", CryptographyDeprecationWarning)
        ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError(f"the cluster CA's key is a {type(ca_key).__name__}: expected RSA or EC")
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in who.groups]
    names.append(x509.NameAttribute(NameOID.COMMON_NAME, who.user))
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(names))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(now + VALIDITY, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def write_kubeconfig(pki_dir: Path, cluster_pki: Path, who: Identity, server: str) -> Path:
    """Issue ``who``'s certificate into ``pki_dir`` and write its kubeconfig for ``server``."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    ca = pki_dir / "ca.crt"
    ca.write_bytes((cluster_pki / "ca.crt").read_bytes())
    cert, key = client_certificate(ca.read_bytes(), (cluster_pki / "ca.key").read_bytes(), who)
    cert_file, key_file = pki_dir / f"{who.file}.crt", pki_dir / f"{who.file}.key"
    cert_file.write_bytes(cert)
    key_file.touch(mode=0o600)
    key_file.write_bytes(key)
    path = kubeconfig_path(pki_dir, who)
    doc = configs.kubeconfig(server=server, ca_file=ca, cert_file=cert_file, key_file=key_file, user=who.user)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def kubeconfig_path(pki_dir: Path, who: Identity) -> Path:
    return pki_dir / f"{who.file}.kubeconfig"
