"""``mlops-platform run``: the operator."""

from __future__ import annotations

import asyncio
import contextlib

import click

from mlops_platform.cli import options, settings, webhook


@click.command()
@click.option("--kubeconfig", type=click.Path(dir_okay=False), help="default: $KUBECONFIG, then in-cluster")
@click.option("--context", help="kubeconfig context (default: current)")
@click.option("--namespace", help="watch only this namespace (default: all)")
@click.option("--leader-elect/--no-leader-elect", default=False, show_default=True)
@click.option("--leader-election-namespace", default="mlops-system", show_default=True)
@click.option("--leader-election-id", default="mlops-platform-operator", show_default=True)
@click.option(
    "--lease-duration", default=15.0, show_default=True, help="seconds a Lease is valid without renewal"
)
@click.option("--renew-deadline", default=10.0, show_default=True, help="seconds a holder retries renewing")
@click.option("--retry-period", default=2.0, show_default=True, help="seconds between Lease attempts")
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="partitions of the InferenceServices, each behind its own Lease (implies Leases; 1: no sharding)",
)
@click.option(
    "--shard-id",
    type=int,
    default=None,
    help="hold exactly this partition, in [0, --shards) (default: a fair share, rebalanced live)",
)
@click.option(
    "--health-probe-bind-address",
    default="127.0.0.1:8081",
    show_default=True,
    help="HOST:PORT of /healthz and /readyz; port 0: one the kernel picks (logged: 'serving'); 0: off",
)
@click.option(
    "--metrics-bind-address",
    default="127.0.0.1:8080",
    show_default=True,
    help="HOST:PORT of /metrics; port 0: one the kernel picks (logged: 'serving'); 0: off",
)
@click.option(
    "--runtime-config", type=click.Path(exists=True, dir_okay=False), help="YAML overriding the runtime table"
)
@click.option(
    "--workers",
    default=16,
    show_default=True,
    help="concurrent reconciles (docs/measurements.md, Scale: the worker count)",
)
@click.option(
    "--readiness-requires-leadership/--no-readiness-requires-leadership",
    default=True,
    show_default=True,
    help="with leader election, /readyz is 200 only on the leader (off: every synced replica)",
)
@click.option(
    "--monitoring/--no-monitoring",
    default=True,
    show_default=True,
    help="PrometheusRule + ServiceMonitor per InferenceService where the Prometheus Operator CRDs exist",
)
@options.labels_option(
    "--monitoring-label",
    "monitoring_labels",
    "label on every PrometheusRule and ServiceMonitor (what Prometheus' selectors need)",
)
@click.option(
    "--monitoring-namespace",
    default="monitoring",
    show_default=True,
    help="namespace whose pods may scrape the metrics port (NetworkPolicy)",
)
@click.option(
    "--alert-error-ratio",
    type=click.FloatRange(0, 1, min_open=True),
    help="default error-ratio alert threshold (0.05)",
)
@click.option(
    "--alert-latency-seconds",
    type=click.FloatRange(0, min_open=True),
    help="default latency alert threshold in seconds (1.0)",
)
@click.option(
    "--network-policy/--no-network-policy",
    default=False,
    show_default=True,
    help="a NetworkPolicy per InferenceService by default (per-object: spec.extensions.networkPolicy)",
)
@options.labels_option(
    "--network-policy-ingress-namespace-label",
    "ingress_namespace_labels",
    "namespaces with these labels may reach the serving ports (mesh/ingress gateways)",
)
@click.option(
    "--network-policy-egress-cidr",
    "egress_cidrs",
    multiple=True,
    callback=lambda ctx, param, value: options.parse_cidrs(param, value),
    metavar="CIDR",
    help="restrict predictor egress to these CIDRs plus DNS (default: egress unrestricted); repeatable",
)
@click.option(
    "--traffic-router",
    type=click.Choice(["auto", "istio", "gateway-api", "replicas"]),
    default="auto",
    show_default=True,
    help="what splits canary traffic: auto = Istio if its CRDs are installed, else the Gateway API if "
    "installed and --gateway is set, else replicas (per-object: spec.extensions.traffic.router)",
)
@click.option(
    "--gateway",
    callback=lambda ctx, param, value: settings.check_gateway(param, value),
    metavar="NAMESPACE/NAME",
    help="the parent Gateway of the HTTPRoutes of the gateway-api router",
)
@click.option(
    "--ingress-domain",
    default="example.com",
    show_default=True,
    help="HTTPRoute hostnames are <name>.<namespace>.<ingress-domain>",
)
@click.option(
    "--keda-prometheus-url",
    default="http://prometheus-operated.monitoring.svc:9090",
    show_default=True,
    help="the Prometheus that KEDA ScaledObjects (minReplicas 0, KEDA installed) query",
)
@click.option(
    "--keda-requests-per-replica",
    type=click.FloatRange(0, min_open=True),
    default=10.0,
    show_default=True,
    help="requests per second per replica before KEDA adds one",
)
@click.option(
    "--storage-initializer-image",
    default=settings.DEFAULT_STORAGE_INITIALIZER_IMAGE,
    show_default=True,
    help="the image of the init container that fetches s3/gs/http(s) models (python -m "
    "mlops_platform.storage); the install manifests pass the operator's own image",
)
@click.option("--log-level", default="info", show_default=True)
@webhook.webhook_options
def run(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    leader_elect: bool,
    leader_election_namespace: str,
    leader_election_id: str,
    lease_duration: float,
    renew_deadline: float,
    retry_period: float,
    shards: int,
    shard_id: int | None,
    health_probe_bind_address: str,
    metrics_bind_address: str,
    runtime_config: str | None,
    workers: int,
    readiness_requires_leadership: bool,
    monitoring: bool,
    monitoring_labels: dict[str, str],
    monitoring_namespace: str,
    alert_error_ratio: float | None,
    alert_latency_seconds: float | None,
    network_policy: bool,
    ingress_namespace_labels: dict[str, str],
    egress_cidrs: tuple[str, ...],
    traffic_router: str,
    gateway: str | None,
    ingress_domain: str,
    keda_prometheus_url: str,
    keda_requests_per_replica: float,
    storage_initializer_image: str,
    log_level: str,
    webhook_bind_address: str,
    webhook_secret: str,
    webhook_dns_names: tuple[str, ...],
    webhook_cert_dir: str | None,
    webhook_reuse_port: bool,
    webhook_cert_validity: float | None,
) -> None:
    """Run the operator until SIGTERM/SIGINT (graceful: in-flight reconciles finish, Lease released).

    Every replica also serves the conversion webhook at once, leader or not (``--webhook-*``)."""
    from mlops_platform.controllers.inferenceservice import controller
    from mlops_platform.runtime.control import manager as rmanager
    from mlops_platform.runtime.observability import logs
    from mlops_platform.runtime.transport import client as rclient

    _check_leases(lease_duration, renew_deadline, retry_period, shards, shard_id)
    logs.setup_logging(level=log_level)
    operator_settings = settings.build_context(
        runtime_config,
        monitoring=monitoring,
        monitoring_labels=monitoring_labels,
        monitoring_namespace=monitoring_namespace,
        error_ratio=alert_error_ratio,
        latency_seconds=alert_latency_seconds,
        network_policy=network_policy,
        ingress_namespace_labels=ingress_namespace_labels,
        egress_cidrs=egress_cidrs,
        traffic_router=traffic_router,
        gateway=gateway,
        ingress_domain=ingress_domain,
        keda_prometheus_url=keda_prometheus_url,
        keda_requests_per_replica=keda_requests_per_replica,
        storage_initializer_image=storage_initializer_image,
    )

    async def main_async() -> None:
        async with rclient.Client.from_kubeconfig(kubeconfig, context=context) as c:
            mgr = rmanager.Manager(
                c,
                rmanager.Options(
                    namespace=namespace,
                    leader_election=leader_elect,
                    leader_election_id=leader_election_id,
                    leader_election_namespace=leader_election_namespace,
                    lease_duration=lease_duration,
                    renew_deadline=renew_deadline,
                    retry_period=retry_period,
                    shards=shards,
                    shard_id=shard_id,
                    health_probe_address=options.parse_address(health_probe_bind_address),
                    metrics_address=options.parse_address(metrics_bind_address),
                    readiness_requires_leadership=readiness_requires_leadership,
                    gc_freeze_after_sync=True,  # this process runs this one manager
                ),
            )
            controller.setup(mgr, settings=operator_settings, workers=workers)
            hook = webhook.build(
                c, webhook_bind_address, webhook_secret, webhook_dns_names, webhook_cert_dir,
                webhook_cert_validity, mgr.metrics.registry, reuse_port=webhook_reuse_port,
            )  # fmt: skip
            if hook is None:
                await mgr.run_until_signal()
                return
            mgr.add_readyz_check("conversion-webhook", hook.ready.is_set)
            serving = asyncio.create_task(hook.run())
            try:
                await mgr.run_until_signal()
            finally:
                serving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await serving

    asyncio.run(main_async())


def _check_leases(
    lease_duration: float, renew_deadline: float, retry_period: float, shards: int, shard_id: int | None
) -> None:
    """The Lease flags, checked like client-go checks its election config, naming the flags."""
    from mlops_platform.runtime.control import leaderelection

    if retry_period <= 0 or renew_deadline <= 0:
        raise click.UsageError("--retry-period and --renew-deadline must be > 0")
    if lease_duration <= renew_deadline:
        raise click.UsageError("--lease-duration must be greater than --renew-deadline")
    if renew_deadline <= leaderelection.JITTER_FACTOR * retry_period:
        raise click.UsageError(
            f"--renew-deadline must be greater than {leaderelection.JITTER_FACTOR} * --retry-period"
        )
    if shard_id is not None and shards == 1:
        raise click.UsageError("--shard-id needs --shards > 1")
    if shard_id is not None and not 0 <= shard_id < shards:
        raise click.UsageError(f"--shard-id must be in [0, --shards) = [0, {shards}), got {shard_id}")
