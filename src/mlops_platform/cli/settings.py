"""The operator-wide settings (a ``BuildContext``) from flags: ``run`` sets them, ``why`` must match them."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from mlops_platform import __version__

#: the operator's own image reference (``deploy.manifests.DEFAULT_IMAGE``, spelled here so that the
#: CLI starts without importing the install manifests); ``--storage-initializer-image``'s default
DEFAULT_STORAGE_INITIALIZER_IMAGE = f"mlops-platform:{__version__}"

if TYPE_CHECKING:  # imported lazily at run time: the CLI starts fast
    from mlops_platform.cli.options import F
    from mlops_platform.controllers.inferenceservice.children.base import BuildContext
    from mlops_platform.controllers.inferenceservice.servers import ServingRuntimeTable


@dataclasses.dataclass(frozen=True)
class SettingsFlags:
    """``run``'s flags of the operator-wide settings."""

    runtime_config: str | None
    monitoring: bool
    monitoring_labels: dict[str, str]
    monitoring_namespace: str
    scrape_interval: str
    alert_error_ratio: float | None
    alert_latency_seconds: float | None
    network_policy: bool
    ingress_namespace_labels: dict[str, str]
    egress_cidrs: tuple[str, ...]
    traffic_router: str
    gateway: str | None
    ingress_domain: str
    keda_prometheus_url: str
    keda_requests_per_replica: float
    activator: str | None
    storage_initializer_image: str


def build_context(flags: SettingsFlags) -> BuildContext:
    """The operator-wide settings from the ``run`` flags (unset alert flags keep the defaults)."""
    from mlops_platform.controllers.inferenceservice import alert_settings
    from mlops_platform.controllers.inferenceservice.children import base

    defaults = alert_settings.AlertSettings()
    error_ratio, latency_seconds = flags.alert_error_ratio, flags.alert_latency_seconds
    return base.BuildContext(
        servers=runtime_table(flags.runtime_config),
        monitoring=flags.monitoring,
        monitoring_labels=flags.monitoring_labels,
        alerts=alert_settings.AlertSettings(
            error_ratio=defaults.error_ratio if error_ratio is None else error_ratio,
            latency_seconds=defaults.latency_seconds if latency_seconds is None else latency_seconds,
        ),
        network_policy=flags.network_policy,
        ingress_namespace_labels=flags.ingress_namespace_labels or None,
        monitoring_namespace=flags.monitoring_namespace,
        scrape_interval=flags.scrape_interval,
        egress_cidrs=flags.egress_cidrs,
        router=base.Router(flags.traffic_router),
        gateway=flags.gateway,
        ingress_domain=flags.ingress_domain,
        keda_prometheus_url=flags.keda_prometheus_url,
        keda_requests_per_replica=flags.keda_requests_per_replica,
        activator=flags.activator,
        storage_initializer_image=flags.storage_initializer_image or base.DEFAULT_STORAGE_INITIALIZER_IMAGE,
    )


def runtime_table(runtime_config: str | None) -> ServingRuntimeTable:
    """The runtime table: the built-in one, with ``--runtime-config`` (a ConfigMap's ``data``) merged."""
    import yaml

    from mlops_platform.controllers.inferenceservice import runtime_overrides, servers

    if not runtime_config:
        return servers.default_table()
    with open(runtime_config) as f:
        return runtime_overrides.load_overrides(yaml.safe_load(f) or {})


def check_scrape_interval(param: click.Parameter, value: str) -> str:
    """``--scrape-interval``: a Prometheus duration above zero (the ServiceMonitor's ``interval``)."""
    from mlops_platform.controllers.inferenceservice import alert_settings

    try:
        seconds = alert_settings.parse_duration(value)
    except ValueError as e:
        raise click.BadParameter(str(e), param=param) from None
    if seconds <= 0:
        raise click.BadParameter(f"must be a duration > 0, got {value!r}", param=param)
    return value


def check_gateway(param: click.Parameter, value: str | None) -> str | None:
    """``--gateway`` or ``--activator`` ``NAMESPACE/NAME``: both parts DNS labels."""
    if value is None:
        return None
    label = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    parts = value.split("/")
    if len(parts) != 2 or not all(label.match(p) for p in parts):
        raise click.BadParameter(f"{value!r} must be NAMESPACE/NAME (DNS labels)", param=param)
    return value


#: the settings flags ``why`` takes too (it must build the children as the operator does): each
#: declared once, the help is the command's
_SHARED_FLAGS: dict[str, dict[str, Any]] = {
    "--traffic-router": {
        "type": click.Choice(["auto", "istio", "gateway-api", "replicas"]),
        "default": "auto",
    },
    "--gateway": {
        "callback": lambda ctx, param, value: check_gateway(param, value),
        "metavar": "NAMESPACE/NAME",
    },
    "--ingress-domain": {"default": "example.com"},
    "--scrape-interval": {
        # the literal of children.base.DEFAULT_SCRAPE_INTERVAL (not imported: the CLI starts fast)
        "default": "30s",
        "show_default": True,
        "callback": lambda ctx, param, value: check_scrape_interval(param, value),
        "metavar": "DURATION",
    },
    "--activator": {
        "callback": lambda ctx, param, value: check_gateway(param, value),
        "metavar": "NAMESPACE/NAME",
    },
    "--runtime-config": {"type": click.Path(exists=True, dir_okay=False)},
    "--storage-initializer-image": {"default": DEFAULT_STORAGE_INITIALIZER_IMAGE},
}


def option(flag: str, help: str) -> Callable[[F], F]:
    """The settings flag ``flag`` (one ``run`` and ``why`` share) with this command's ``help``."""
    return click.option(flag, help=help, **_SHARED_FLAGS[flag])
