"""Where a webhook's certificates come from: one Secret shared by all replicas, or mounted files.

:class:`CertKeeper` keeps the :class:`~.certs.CertState` in one Secret and follows
:func:`~.certs.plan`. Several replicas run one each: the Secret is created if absent and replaced
with its ``resourceVersion`` (optimistic concurrency), so a replica that loses a race (409) re-reads
and plans again from the winner's state: one CA wins, always. Every replica loads the serving
pair from the Secret (``on_serving``) and re-asserts the stored bundle (``inject``) on each pass.

Order of writes: a change of the bundle alone (a CA added or dropped, the serving certificate
signed by a CA trusted before and after) is injected *before* it is stored, so the overlap counts
from a bundle already published; a new state (a new CA that also signs) is stored first and then
injected, so a replica that loses the creation race never publishes its CA.

:class:`FileCertSource` is the cert-manager mode: tls.crt/tls.key (and ca.crt) from a mounted
directory, polled; cert-manager's CA injector publishes the bundle, nothing is written.
:func:`patch_crd_ca_bundle` is an ``inject`` for a CRD's conversion webhook.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from mlops_platform.runtime import clock, objects
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.webhook import certs, keypairs

log = logging.getLogger("mlops_platform.runtime.webhook.keeper")

Inject = Callable[[bytes], Awaitable[object]]
OnServing = Callable[[bytes, bytes], Awaitable[None] | None]

CA_CRT, CA_KEY = "ca.crt", "ca.key"
TLS_CRT, TLS_KEY = "tls.crt", "tls.key"
BUNDLE = "ca-bundle.crt"
NEXT_CA_CRT, NEXT_CA_KEY = "next-ca.crt", "next-ca.key"  # only while a new CA is published, not signing
STEP_SINCE_ANNOTATION = "mlops.platform/cert-step-since"  # when the current rotation step began
PHASE_ANNOTATION = "mlops.platform/cert-phase"  # steady, publishing or retiring (for people)
MAX_CONFLICTS = 10
MIN_INTERVAL = 0.05  # seconds: the shortest wait between passes (no hot loop on a past next_check)


def decode_state(secret: rclient.JSON) -> certs.CertState | None:
    """The state stored in ``secret``, or None when it holds none or an unreadable one."""
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    since = objects.annotations(secret).get(STEP_SINCE_ANNOTATION)
    if not all(k in data for k in (CA_CRT, CA_KEY, TLS_CRT, TLS_KEY, BUNDLE)) or not since:
        return None
    try:
        ca = keypairs.KeyPair(data[CA_CRT], data[CA_KEY])
        next_ca = keypairs.KeyPair(data[NEXT_CA_CRT], data[NEXT_CA_KEY]) if NEXT_CA_CRT in data else None
        known = {c.cert.public_bytes(serialization.Encoding.DER) for c in (ca, next_ca) if c is not None}
        others = [
            c
            for c in keypairs.parse_bundle(data[BUNDLE])
            if c.public_bytes(serialization.Encoding.DER) not in known
        ]
        serving = keypairs.KeyPair(data[TLS_CRT], data[TLS_KEY])
        for pair in (ca, serving, next_ca):
            if pair is not None:
                _ = pair.cert, pair.key  # parsed here: an unreadable PEM is no state, not an error later
        return certs.CertState(
            ca=ca,
            serving=serving,
            step_since=datetime.datetime.fromisoformat(since),
            next_ca=next_ca,
            retired_ca=others[-1] if others and next_ca is None else None,
        )
    except ValueError as e:
        log.warning(
            "the certificate Secret holds an unreadable state; starting afresh", extra={"error": str(e)}
        )
        return None


def encode_state(state: certs.CertState) -> tuple[dict[str, str], dict[str, str]]:
    """The Secret ``data`` and annotations of ``state``."""
    raw = {
        CA_CRT: state.ca.cert_pem,
        CA_KEY: state.ca.key_pem,
        TLS_CRT: state.serving.cert_pem,
        TLS_KEY: state.serving.key_pem,
        BUNDLE: state.bundle,
    }
    if state.next_ca is not None:
        raw[NEXT_CA_CRT], raw[NEXT_CA_KEY] = state.next_ca.cert_pem, state.next_ca.key_pem
    data = {k: base64.b64encode(v).decode() for k, v in raw.items()}
    annotations = {STEP_SINCE_ANNOTATION: clock.rfc3339(state.step_since, 6), PHASE_ANNOTATION: state.phase}
    return data, annotations


async def _call(on_serving: OnServing | None, cert_pem: bytes, key_pem: bytes) -> None:
    if on_serving is not None:
        result = on_serving(cert_pem, key_pem)
        if inspect.isawaitable(result):
            await result


class CertKeeper:
    """Self-managed webhook certificates in the Secret ``namespace/name`` (see the module docstring).

    ``inject(bundle)`` publishes the CA bundle (e.g. :func:`patch_crd_ca_bundle`); it is called on
    every pass and must be idempotent. ``on_serving(cert_pem, key_pem)`` (sync or async) gets the
    serving pair whenever it changes, e.g. :meth:`~.server.WebhookServer.set_certificate`.
    ``period`` (seconds) bounds how late a replica sees another's change: the policy's overlap must
    exceed it (plus the clients' own delay in using a new bundle)."""

    def __init__(
        self,
        client: rclient.Client,
        namespace: str,
        name: str,
        *,
        dns_names: Sequence[str],
        ip_addresses: Sequence[str] = (),
        inject: Inject | None = None,
        on_serving: OnServing | None = None,
        policy: certs.RotationPolicy | None = None,
        period: float = 60.0,
        ca_name: str = "webhook-ca",
        now: Callable[[], datetime.datetime] = clock.utcnow,
    ) -> None:
        self.client = client
        self.namespace, self.name = namespace, name
        self.dns_names, self.ip_addresses = tuple(dns_names), tuple(ip_addresses)
        self.inject, self.on_serving = inject, on_serving
        self.policy = policy if policy is not None else certs.RotationPolicy()
        # another replica's change reaches this one within a period: a serving certificate renewed
        # elsewhere must stay valid that long, and a new or old CA stay trusted that long
        margin = min(self.policy.cert_validity * (1 - self.policy.renew_at), self.policy.overlap)
        if not 0 < period < margin.total_seconds():
            raise ValueError(
                f"period must be positive and shorter than the overlap and the serving certificate's "
                f"renewal margin ({margin.total_seconds():g}s)"
            )
        self.period = period
        self.ca_name = ca_name
        self._now = now
        #: set once a serving pair is loaded (and handed to on_serving)
        self.ready = asyncio.Event()
        #: the state last read or written, and the serving pair last handed to on_serving
        self.state: certs.CertState | None = None
        self.serving: keypairs.KeyPair | None = None
        self.writes = 0  # Secret creates and replaces that succeeded
        self.conflicts = 0  # writes that lost a race (409) and were planned again

    async def run(self) -> None:
        """Reconcile until cancelled: on every ``period`` and at the next planned rotation time."""
        failures = 0
        while True:
            try:
                next_check = await self.reconcile()
                failures = 0
                delay = min(self.period, (next_check - self._now()).total_seconds())
            except Exception as e:
                failures += 1
                delay = min(self.period, 0.5 * 2 ** min(failures, 10))
                log.warning(
                    "certificate reconcile failed; retrying",
                    extra={"secret": f"{self.namespace}/{self.name}", "error": f"{type(e).__name__}: {e}"},
                )
            await asyncio.sleep(max(MIN_INTERVAL, delay))

    async def reconcile(self) -> datetime.datetime:
        """One pass: read, inject the stored bundle, plan, write if needed, load. Return when to
        plan again at the latest."""
        for _ in range(MAX_CONFLICTS):
            secret = await self._get()
            stored = decode_state(secret) if secret is not None else None
            if stored is not None:
                await self._inject(stored.bundle)
            p = certs.plan(
                stored,
                now=self._now(),
                policy=self.policy,
                dns_names=self.dns_names,
                ip_addresses=self.ip_addresses,
                ca_name=self.ca_name,
            )
            if p.changes:
                trust_first = p.bundle_changed and not p.changes & {
                    certs.Change.CREATED,
                    certs.Change.CA_SWITCHED,
                }
                if trust_first:
                    await self._inject(p.state.bundle)
                try:
                    await self._write(secret, p.state)
                except rclient.ApiError as e:
                    if not e.conflict:
                        raise
                    self.conflicts += 1
                    log.info(
                        "certificate Secret changed concurrently; planning again", extra={"reason": e.reason}
                    )
                    continue
                self.writes += 1
                log.info(
                    "certificates changed",
                    extra={
                        "secret": f"{self.namespace}/{self.name}",
                        "changes": sorted(c.value for c in p.changes),
                        "phase": p.state.phase,
                        "serving_not_after": p.state.serving.not_after.isoformat(),
                    },
                )
                if p.bundle_changed and not trust_first:
                    await self._inject(p.state.bundle)
            self.state = p.state
            if self.serving != p.state.serving:
                await _call(self.on_serving, p.state.serving.cert_pem, p.state.serving.key_pem)
                self.serving = p.state.serving
                self.ready.set()
            return p.next_check
        raise RuntimeError(f"Secret {self.namespace}/{self.name}: {MAX_CONFLICTS} write conflicts in a row")

    async def _inject(self, bundle: bytes) -> None:
        if self.inject is not None:
            await self.inject(bundle)

    async def _get(self) -> rclient.JSON | None:
        try:
            return await self.client.get(resources.SECRET, self.name, self.namespace)
        except rclient.ApiError as e:
            if e.not_found:
                return None
            raise

    async def _write(self, secret: rclient.JSON | None, state: certs.CertState) -> None:
        data, annotations = encode_state(state)
        if secret is None:
            body: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.name, "namespace": self.namespace, "annotations": annotations},
                "type": "kubernetes.io/tls",
                "data": data,
            }
            await self.client.create(resources.SECRET, body, self.namespace)
            return
        ours = {CA_CRT, CA_KEY, TLS_CRT, TLS_KEY, BUNDLE, NEXT_CA_CRT, NEXT_CA_KEY}
        kept = {k: v for k, v in (secret.get("data") or {}).items() if k not in ours}
        metadata = dict(secret["metadata"])  # with its resourceVersion: a concurrent write is a 409
        metadata["annotations"] = {**objects.annotations(secret), **annotations}
        await self.client.replace(
            resources.SECRET, {**secret, "metadata": metadata, "data": {**kept, **data}}
        )


class FileCertSource:
    """The serving pair from ``directory`` (``tls.crt``, ``tls.key``, optional ``ca.crt``), e.g. a
    Secret issued by cert-manager and mounted by the kubelet; polled every ``period`` seconds.

    ``on_serving`` gets the pair whenever it changes. A pair whose key does not match its
    certificate (read in the middle of an update) is skipped until the next poll."""

    def __init__(
        self, directory: str | Path, *, on_serving: OnServing | None = None, period: float = 10.0
    ) -> None:
        self.directory = Path(directory)
        self.on_serving = on_serving
        self.period = period
        self.ready = asyncio.Event()
        self.serving: keypairs.KeyPair | None = None
        self.ca_pem: bytes | None = None  # ca.crt, when the directory has one

    async def run(self) -> None:
        while True:
            try:
                await self.reload()
            except Exception as e:
                log.warning(
                    "loading the serving certificate failed",
                    extra={"directory": str(self.directory), "error": f"{type(e).__name__}: {e}"},
                )
            await asyncio.sleep(self.period)

    async def reload(self) -> bool:
        """Read the files once; hand a changed, consistent pair to ``on_serving``. True if it did."""
        pair, ca = _read_pair(self.directory)
        if pair is None or pair == self.serving:
            return False
        if not pair.matches():
            log.info("serving key and certificate do not match (an update in progress?)")
            return False
        await _call(self.on_serving, pair.cert_pem, pair.key_pem)
        self.serving, self.ca_pem = pair, ca
        self.ready.set()
        return True


def _read_pair(directory: Path) -> tuple[keypairs.KeyPair | None, bytes | None]:
    try:
        pair = keypairs.KeyPair((directory / TLS_CRT).read_bytes(), (directory / TLS_KEY).read_bytes())
    except FileNotFoundError:
        return None, None
    ca_path = directory / CA_CRT
    return pair, ca_path.read_bytes() if ca_path.exists() else None


async def patch_crd_ca_bundle(client: rclient.Client, crd_name: str, bundle: bytes) -> bool:
    """Set the CRD's ``spec.conversion.webhook.clientConfig.caBundle`` to ``bundle`` (a JSON merge
    patch) unless it already is; True if it patched. The CRD must use the Webhook strategy."""
    crd = await client.get(resources.CRD, crd_name)
    conversion = crd.get("spec", {}).get("conversion") or {}
    if conversion.get("strategy") != "Webhook":
        raise ValueError(f"CRD {crd_name} does not convert through a webhook")
    wanted = base64.b64encode(bundle).decode()
    if ((conversion.get("webhook") or {}).get("clientConfig") or {}).get("caBundle") == wanted:
        return False
    patch = {"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": wanted}}}}}
    await client.patch(resources.CRD, crd_name, patch)
    return True
