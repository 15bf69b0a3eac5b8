"""``mlops-platform run``: the operator."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

import click

from mlops_platform.cli import options, settings, webhook

if TYPE_CHECKING:  # imported lazily at run time: the CLI starts fast
    from mlops_platform import promclient
    from mlops_platform.controllers.inferenceservice.children.base import BuildContext
    from mlops_platform.runtime.control import manager as rmanager
    from mlops_platform.runtime.transport import client as rclient


@click.command()
@options.kubeconfig_options(options.KUBECONFIG_DEFAULT)
@click.option("--namespace", help="watch only this namespace (default: all)")
@click.option("--leader-elect/--no-leader-elect", default=False)
@click.option("--leader-election-namespace", default="mlops-system")
@click.option("--leader-election-id", default="mlops-platform-operator")
@click.option("--lease-duration", default=15.0, help="seconds a Lease is valid without renewal")
@click.option("--renew-deadline", default=10.0, help="seconds a holder retries renewing")
@click.option("--retry-period", default=2.0, help="seconds between Lease attempts")
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=1,
    help="partitions of the InferenceServices, each behind its own Lease (implies Leases; 1: no sharding)",
)
@click.option(
    "--shard-id",
    type=int,
    default=None,
    help="hold exactly this partition, in [0, --shards) (default: a fair share, rebalanced live)",
)
@options.address_option(
    "--health-probe-bind-address",
    default="127.0.0.1:8081",
    off="0",
    help="HOST:PORT of /healthz and /readyz; port 0: one the kernel picks (logged: 'serving'); 0: off",
)
@options.address_option(
    "--metrics-bind-address",
    default="127.0.0.1:8080",
    off="0",
    help="HOST:PORT of /metrics; port 0: one the kernel picks (logged: 'serving'); 0: off",
)
@settings.option("--runtime-config", "YAML overriding the runtime table")
@click.option(
    "--workers", default=16, help="concurrent reconciles (docs/measurements.md, Scale: the worker count)"
)
@click.option(
    "--readiness-requires-leadership/--no-readiness-requires-leadership",
    default=True,
    help="with leader election, /readyz is 200 only on the leader (off: every synced replica)",
)
@click.option(
    "--monitoring/--no-monitoring",
    default=True,
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
    help="namespace whose pods may scrape the metrics port (NetworkPolicy)",
)
@settings.option(
    "--scrape-interval",
    "how often Prometheus scrapes each predictor pod: the ServiceMonitors' interval (a Prometheus "
    "duration); alerts and KEDA's trigger see a change within about two of them",
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
@settings.option(
    "--traffic-router",
    "what splits canary traffic: auto = Istio if its CRDs are installed, else the Gateway API if "
    "installed and --gateway is set, else replicas (per-object: spec.extensions.traffic.router)",
)
@settings.option("--gateway", "the parent Gateway of the HTTPRoutes of the gateway-api router")
@settings.option("--ingress-domain", "HTTPRoute hostnames are <name>.<namespace>.<ingress-domain>")
@click.option(
    "--keda-prometheus-url",
    default="http://prometheus-operated.monitoring.svc:9090",
    help="the Prometheus that KEDA ScaledObjects (minReplicas 0, KEDA installed) query",
)
@click.option(
    "--keda-requests-per-replica",
    type=click.FloatRange(0, min_open=True),
    default=10.0,
    help="requests per second per replica before KEDA adds one",
)
@settings.option(
    "--activator",
    "the activator's Service: a KEDA-scaled InferenceService at zero is parked behind it, which holds "
    "its requests until KEDA has woken it (default: none; without it or a mesh a request at zero fails)",
)
@settings.option(
    "--storage-initializer-image",
    "the image of the init container that fetches s3/gs/http(s) models (python -m "
    "mlops_platform.storage); the install manifests pass the operator's own image",
)
@click.option(
    "--cache-sync-timeout",
    type=click.FloatRange(0, min_open=True),
    default=120.0,
    show_default=True,
    help="seconds the informers may take to list every watched kind at start; past it the process "
    "exits naming the kinds it could not list (controller-runtime's CacheSyncTimeout)",
)
@click.option("--log-level", default="info")
@webhook.webhook_options
@options.prometheus_options
def run(**flags: Any) -> None:
    """Run the operator until SIGTERM/SIGINT (graceful: in-flight reconciles finish, Lease released).

    Every replica also serves the conversion webhook at once, leader or not (``--webhook-*``)."""
    from mlops_platform import promclient
    from mlops_platform.runtime.observability import logs

    leases = options.take(LeaseFlags, flags)
    leases.check()
    process = options.take(ProcessFlags, flags)
    logs.setup_logging(level=process.log_level)
    operator_settings = settings.build_context(options.take(settings.SettingsFlags, flags))
    hook = options.take(webhook.WebhookFlags, flags)
    prometheus = options.take(promclient.Options, flags)
    options.prometheus_endpoint(prometheus)  # a usage error before anything starts
    if flags:
        raise TypeError(f"run: flags of no group: {sorted(flags)}")
    try:
        asyncio.run(_serve(process, leases, operator_settings, hook, prometheus))
    except OSError as e:  # the probe or metrics server could not listen (the webhook: webhook.serve)
        if e.errno not in options.CANNOT_LISTEN:
            raise
        raise options.cannot_listen(
            e,
            health_probe_bind_address=process.health_probe_bind_address,
            metrics_bind_address=process.metrics_bind_address,
        ) from None


@dataclasses.dataclass(frozen=True)
class LeaseFlags:
    """``run``'s leader election and sharding flags."""

    leader_elect: bool
    leader_election_namespace: str
    leader_election_id: str
    lease_duration: float
    renew_deadline: float
    retry_period: float
    shards: int
    shard_id: int | None

    def check(self) -> None:
        """The Lease flags, checked like client-go checks its election config, naming the flags."""
        from mlops_platform.runtime.control import leaderelection

        if self.retry_period <= 0 or self.renew_deadline <= 0:
            raise click.UsageError("--retry-period and --renew-deadline must be > 0")
        if self.lease_duration <= self.renew_deadline:
            raise click.UsageError("--lease-duration must be greater than --renew-deadline")
        if self.renew_deadline <= leaderelection.JITTER_FACTOR * self.retry_period:
            raise click.UsageError(
                f"--renew-deadline must be greater than {leaderelection.JITTER_FACTOR} * --retry-period"
            )
        shards, shard_id = self.shards, self.shard_id
        if shard_id is not None and shards == 1:
            raise click.UsageError("--shard-id needs --shards > 1")
        if shard_id is not None and not 0 <= shard_id < shards:
            raise click.UsageError(f"--shard-id must be in [0, --shards) = [0, {shards}), got {shard_id}")


@dataclasses.dataclass(frozen=True)
class ProcessFlags:
    """``run``'s flags of the process: where it connects, what it watches, what it serves."""

    kubeconfig: str | None
    context: str | None
    namespace: str | None
    health_probe_bind_address: str
    metrics_bind_address: str
    workers: int
    readiness_requires_leadership: bool
    log_level: str
    cache_sync_timeout: float = 120.0


def _manager_options(process: ProcessFlags, leases: LeaseFlags) -> rmanager.Options:
    """The manager's options from the flags (this process runs this one manager)."""
    from mlops_platform.runtime.control import manager as rmanager

    return rmanager.Options(
        namespace=process.namespace,
        leader_election=leases.leader_elect,
        leader_election_id=leases.leader_election_id,
        leader_election_namespace=leases.leader_election_namespace,
        lease_duration=leases.lease_duration,
        renew_deadline=leases.renew_deadline,
        retry_period=leases.retry_period,
        shards=leases.shards,
        shard_id=leases.shard_id,
        health_probe_address=options.parse_address(process.health_probe_bind_address),
        metrics_address=options.parse_address(process.metrics_bind_address),
        readiness_requires_leadership=process.readiness_requires_leadership,
        cache_sync_timeout=process.cache_sync_timeout,
        gc_freeze_after_sync=True,  # this process runs this one manager
    )


async def _serve(
    process: ProcessFlags,
    leases: LeaseFlags,
    operator_settings: BuildContext,
    hook_flags: webhook.WebhookFlags,
    prometheus: promclient.Options,
) -> None:
    """The manager with the InferenceService controller, and the conversion webhook beside it (unless
    ``--webhook-bind-address off``), until SIGTERM/SIGINT. The canary analyses' Prometheus client
    (``--prometheus*``) lives as long as the manager: its measurements are cancelled, then it closes."""
    from mlops_platform import promclient
    from mlops_platform.controllers.inferenceservice import controller
    from mlops_platform.runtime.control import manager as rmanager
    from mlops_platform.runtime.transport import client as rclient

    async with rclient.Client.from_kubeconfig(process.kubeconfig, context=process.context) as c:
        mgr = rmanager.Manager(c, _manager_options(process, leases))
        queries = promclient.QueryClient.from_options(prometheus, api=c)
        rec = controller.setup(mgr, settings=operator_settings, workers=process.workers, prometheus=queries)
        try:
            await _run(mgr, c, hook_flags)
        finally:
            rec.analysis.measurer.close()
            await rec.analysis.measurer.drain()  # the cancelled measurements end before their client
            await queries.close()


async def _run(mgr: rmanager.Manager, c: rclient.Client, hook_flags: webhook.WebhookFlags) -> None:
    from mlops_platform.runtime import background

    hook = webhook.build(c, hook_flags, mgr.metrics.registry)
    if hook is None:
        await mgr.run_until_signal()
        return
    mgr.add_readyz_check("conversion-webhook", hook.ready.is_set)
    async with background.task(webhook.serve(hook, hook_flags)) as serving:
        # the webhook ending (it failed: it runs until cancelled) stops the manager, and its error
        # is raised at the block's end: the operator does not run on without its webhook
        serving.add_done_callback(lambda _: mgr.stop())
        await mgr.run_until_signal()
