"""Serve the InferenceService conversion webhook: on every replica, leader or not, before the
manager leads (a broken conversion webhook blocks reads, writes and garbage collection of every
InferenceService in the cluster, so it must never wait for leadership).

- :class:`Options`: where it listens and where its certificates come from: self-managed (a CA and
  serving certificate in one Secret shared by the replicas, rotated with overlap, the CA bundle
  injected into the CRD's ``spec.conversion.webhook.clientConfig.caBundle``) or mounted files
  (``cert_dir``: cert-manager's Certificate; its CA injector sets the bundle).
- :class:`ConversionWebhook`: ``await run()`` until cancelled; ``ready`` once a certificate is
  served. Request count and latency use controller-runtime's metric names
  (``controller_runtime_webhook_requests_total``, ``..._latency_seconds``, ``..._in_flight``) in the
  registry given (the manager's, so ``/metrics`` shows them).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
from pathlib import Path

from prometheus_client import CollectorRegistry

from mlops_platform.api import CRD_NAME, crd
from mlops_platform.runtime import rbac
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.webhook import certs, keeper, server
from mlops_platform.webhooks import conversion

log = logging.getLogger("mlops_platform.webhooks")

SECRET = ("mlops-system", "mlops-platform-webhook-tls")

# The self-managed certificates: one Secret in the operator's namespace (the "leader-election" scope),
# read and replaced by name; created when absent (``create`` cannot be limited by name). The CA
# bundle is patched into this operator's CRD only. Not used with ``cert_dir`` (cert-manager mode).
RBAC = (
    rbac.requires(
        "",
        "secrets",
        ["get", "update"],
        why="the conversion webhook's certificates (read, rotate)",
        scope="leader-election",
        resource_names=[SECRET[1]],
    ),
    rbac.requires(
        "",
        "secrets",
        ["create"],
        why="the conversion webhook's certificates (first replica creates the Secret)",
        scope="leader-election",
    ),
    rbac.requires(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ["get", "patch"],
        why="inject the webhook's CA bundle into spec.conversion",
        scope="cluster",
        resource_names=[CRD_NAME],
    ),
)


def service_dns_names(namespace: str, name: str) -> tuple[str, ...]:
    """The names the API server uses for the in-cluster webhook Service."""
    return (f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local")


#: how long a stopping webhook waits for the API server to let go of its connections (each request
#: on them answered with Connection: close) before it closes the ones left idle
#: (:mod:`mlops_platform.runtime.webhook.drain`); under load they go within a second
DRAIN_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class Options:
    host: str = "127.0.0.1"
    port: int = 9443
    #: the Secret holding the self-managed CA and serving certificate (namespace, name)
    secret: tuple[str, str] = SECRET
    dns_names: tuple[str, ...] = service_dns_names(*crd.WEBHOOK_SERVICE[:2])
    ip_addresses: tuple[str, ...] = ("127.0.0.1",)
    #: mounted certificate files (tls.crt, tls.key): cert-manager mode, no Secret, no injection
    cert_dir: Path | None = None
    policy: certs.RotationPolicy = dataclasses.field(default_factory=certs.RotationPolicy)
    #: seconds between certificate checks (another replica's rotation reaches this one within it)
    period: float = 60.0
    #: share the port with other processes of this host (SO_REUSEPORT): replicas on one machine
    reuse_port: bool = False
    #: seconds new connections are still accepted once stopping, before the drain: behind a Service,
    #: the kube-proxies of the cluster go on sending new connections to a terminating pod until they
    #: have seen its endpoint go (a refused connection fails the API server's request)
    shutdown_delay: float = 0.0


async def _convert(body: bytes) -> bytes:
    return conversion.review(body)


class ConversionWebhook:
    def __init__(
        self, client: rclient.Client, options: Options, *, registry: CollectorRegistry | None = None
    ) -> None:
        self.client = client
        self.options = options
        self.server = server.WebhookServer(
            {crd.WEBHOOK_PATH: _convert},
            host=options.host,
            port=options.port,
            registry=registry,
            reuse_port=options.reuse_port,
        )
        self.source: keeper.CertKeeper | keeper.FileCertSource
        if options.cert_dir is not None:
            self.source = keeper.FileCertSource(
                options.cert_dir, on_serving=self.server.set_certificate, period=options.period
            )
        else:
            namespace, name = options.secret
            self.source = keeper.CertKeeper(
                client,
                namespace,
                name,
                dns_names=options.dns_names,
                ip_addresses=options.ip_addresses,
                inject=self._inject,
                on_serving=self.server.set_certificate,
                policy=options.policy,
                period=options.period,
                ca_name="mlops-platform-webhook-ca",
            )

    @property
    def ready(self) -> asyncio.Event:
        return self.source.ready

    @property
    def url(self) -> str:
        return self.server.url(crd.WEBHOOK_PATH)

    async def _inject(self, bundle: bytes) -> None:
        if await keeper.patch_crd_ca_bundle(self.client, CRD_NAME, bundle):
            log.info("injected the CA bundle into the CRD", extra={"crd": CRD_NAME})

    async def run(self) -> None:
        """Listen, keep the certificate current, until cancelled (then stop listening)."""
        await self.server.start()
        log.info("conversion webhook listening", extra={"url": self.url})
        try:
            await self.source.run()
        finally:
            if self.options.shutdown_delay:
                log.info("conversion webhook stopping", extra={"accepting_for": self.options.shutdown_delay})
                await asyncio.sleep(self.options.shutdown_delay)  # serving on meanwhile: not a sync
            # new connections go elsewhere; every request on the open ones is answered (a shutdown,
            # e.g. a rolling update, fails none)
            await self.server.stop(grace=DRAIN_SECONDS)


def policy_for_tests(validity_seconds: float) -> certs.RotationPolicy:
    """Short-lived certificates (seconds), so a test sees rotations."""
    ca = datetime.timedelta(seconds=validity_seconds)
    return certs.RotationPolicy(
        ca_validity=ca,
        cert_validity=ca / 3,
        overlap=ca / 8,
        backdate=datetime.timedelta(seconds=5),
    )
