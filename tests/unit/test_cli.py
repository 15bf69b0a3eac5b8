"""The command line's wiring: each of ``run``'s and ``webhook``'s flags reaches the step that uses it,
``python -m mlops_platform.cli`` is the ``mlops-platform`` command (the tests, the demo and the
benchmarks start the operator so), the help shows the defaults, migrate-storage reports."""

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from mlops_platform import cli, promclient
from mlops_platform.cli import operator, settings, webhook
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime.control import storagemigration as sm
from mlops_platform.runtime.control import storagemigration_report as sm_report
from mlops_platform.runtime.observability import logs


def record_served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """What ``run`` and ``webhook`` would serve, recorded instead of served (no logging set up)."""
    seen: list[tuple[Any, ...]] = []

    async def record(*args: Any) -> None:
        seen.append(args)

    monkeypatch.setattr(operator, "_serve", record)
    monkeypatch.setattr(webhook, "_serve", record)
    monkeypatch.setattr(logs, "setup_logging", lambda **kwargs: None)
    return seen


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    return record_served(monkeypatch)


#: ``--webhook-*`` flags that build a webhook; a test replaces the ones it is about
WEBHOOK_FLAGS = webhook.WebhookFlags(
    webhook_bind_address="127.0.0.1:9443",
    webhook_secret="ns/name",
    webhook_dns_names=(),
    webhook_cert_dir=None,
    webhook_reuse_port=False,
    webhook_cert_validity=None,
)


def test_run_hands_every_flag_to_its_step(served: list[tuple[Any, ...]]) -> None:
    args = [
        "run", "--kubeconfig", "k.yaml", "--context", "ctx", "--namespace", "ns", "--leader-elect",
        "--shards", "3", "--shard-id", "2", "--lease-duration", "20", "--workers", "4",
        "--health-probe-bind-address", ":0", "--metrics-bind-address", "0", "--monitoring-label", "a=b",
        "--network-policy-egress-cidr", "10.1.2.3/8", "--alert-error-ratio", "0.1",
        "--traffic-router", "gateway-api", "--gateway", "gw/main", "--storage-initializer-image", "i:1",
        "--webhook-bind-address", "off", "--webhook-dns-name", "a.svc", "--log-level", "debug",
        "--cache-sync-timeout", "20", "--webhook-shutdown-delay", "5", "--scrape-interval", "15s",
        "--prometheus", "mon/prom:9091", "--prometheus-timeout", "3", "--prometheus-retries", "1",
    ]  # fmt: skip
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 0, result.output
    [(process, leases, context, hook, prometheus)] = served
    assert prometheus == promclient.Options(
        prometheus="mon/prom:9091", prometheus_timeout=3.0, prometheus_retries=1
    )
    assert process == operator.ProcessFlags(
        kubeconfig="k.yaml",
        context="ctx",
        namespace="ns",
        health_probe_bind_address=":0",
        metrics_bind_address="0",
        workers=4,
        readiness_requires_leadership=True,
        log_level="debug",
        cache_sync_timeout=20.0,
    )
    assert (leases.leader_elect, leases.shards, leases.shard_id, leases.lease_duration) == (True, 3, 2, 20.0)
    manager_options = operator._manager_options(process, leases)
    assert (manager_options.health_probe_address, manager_options.metrics_address) == (
        ("127.0.0.1", 0),
        None,
    )
    assert manager_options.gc_freeze_after_sync
    assert manager_options.cache_sync_timeout == 20.0
    assert isinstance(context, base.BuildContext)
    assert (context.monitoring_labels, context.egress_cidrs) == ({"a": "b"}, ("10.0.0.0/8",))
    assert (context.alerts.error_ratio, context.router, context.gateway) == (
        0.1,
        base.Router.GATEWAY_API,
        "gw/main",
    )
    assert context.storage_initializer_image == "i:1"
    assert context.scrape_interval == "15s"
    assert hook == webhook.WebhookFlags(
        webhook_bind_address="off",
        webhook_secret="mlops-system/mlops-platform-webhook-tls",
        webhook_dns_names=("a.svc",),
        webhook_cert_dir=None,
        webhook_reuse_port=False,
        webhook_cert_validity=None,
        webhook_shutdown_delay=5.0,
    )


def test_run_defaults_give_the_default_settings(served: list[tuple[Any, ...]]) -> None:
    result = CliRunner().invoke(cli.main, ["run"])
    assert result.exit_code == 0, result.output
    [(_, _, context, _, prometheus)] = served
    assert prometheus == promclient.Options()  # the default Prometheus through the service proxy
    assert context.storage_initializer_image == settings.DEFAULT_STORAGE_INITIALIZER_IMAGE
    assert context.scrape_interval == base.DEFAULT_SCRAPE_INTERVAL
    assert (context.router, context.ingress_namespace_labels, context.monitoring) == (
        base.Router.AUTO,
        None,
        True,
    )


def test_webhook_hands_its_flags_over(served: list[tuple[Any, ...]]) -> None:
    args = ["webhook", "--kubeconfig", "k.yaml", "--metrics-bind-address", "127.0.0.1:0"]
    result = CliRunner().invoke(cli.main, [*args, "--webhook-reuse-port", "--webhook-cert-dir", "certs"])
    assert result.exit_code == 0, result.output
    [(kubeconfig, context, metrics_address, hook)] = served
    assert (kubeconfig, context, metrics_address) == ("k.yaml", None, ("127.0.0.1", 0))
    assert (hook.webhook_bind_address, hook.webhook_reuse_port, hook.webhook_cert_dir) == (
        "127.0.0.1:9443",
        True,
        "certs",
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"webhook_bind_address": "0"}, "'0': HOST:PORT or off"),
        ({"webhook_secret": "no-slash"}, "'no-slash': NAMESPACE/NAME"),
    ],
)
def test_the_webhook_flags_are_checked_naming_the_flag(flags: dict[str, Any], message: str) -> None:
    with pytest.raises(click.BadParameter, match=message):
        webhook.build(None, dataclasses.replace(WEBHOOK_FLAGS, **flags), None)


@pytest.mark.parametrize("value", ["soon", "0s", "30"])
@pytest.mark.parametrize("command", ["run", "why"])
def test_a_bad_scrape_interval_is_refused_naming_the_flag(
    served: list[tuple[Any, ...]], command: str, value: str
) -> None:
    args = [command, *(["iris"] if command == "why" else []), "--scrape-interval", value]
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 2, result.output
    assert "--scrape-interval" in result.output and repr(value) in result.output, result.output
    assert served == []


def test_python_dash_m_runs_the_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "mlops_platform.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("Usage: python -m mlops_platform.cli [OPTIONS] COMMAND [ARGS]...")
    for command in ("run", "webhook", "why", "infer", "manifests", "migrate-storage", "dev", "demo"):
        assert f"  {command} " in out


@pytest.mark.parametrize(
    ("group", "args", "shown"),
    [
        (
            cli.main,
            ["run", "--help"],
            ["[default: 16]", "[default: no-leader-elect]", f"{settings.DEFAULT_STORAGE_INITIALIZER_IMAGE}]"],
        ),
        (cli.main, ["dev", "up", "--help"], ["[default: mlops-dev]", "[default: 180.0]"]),
        (cli.main, ["migrate-storage", "--help"], ["[default: auto]", "[default: 1800.0]"]),
        (cli.plugin, ["why", "--help"], ["[default: text]", "[default: example.com]", "[default: 20;"]),
    ],
)
def test_every_option_with_a_default_shows_it(group: Any, args: list[str], shown: list[str]) -> None:
    result = CliRunner().invoke(group, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    for text in shown:
        assert text in result.output
    assert "[default: None]" not in result.output and "[default: ]" not in result.output


#: a kubeconfig of one cluster at 127.0.0.1 (``%(port)d``: its port) and a token user
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:%(port)d"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def test_migrate_storage_reports_progress_and_a_failed_migration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG % {"port": 1})

    async def migrate(client: Any, crd: str, *, progress: Any, **kwargs: Any) -> sm_report.MigrationResult:
        progress(sm_report.Progress("rewriting", seen=3, total=5, rewritten=2, unchanged=1))
        raise sm_report.MigrationError("2 objects not rewritten")

    monkeypatch.setattr(sm, "migrate", migrate)
    result = CliRunner().invoke(cli.main, ["migrate-storage", "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 1
    assert "s] rewriting: 3/5 objects (2 rewritten, 1 already current, 0 conflicts" in result.output
    assert result.output.endswith("Error: inferenceservices.mlops.platform: 2 objects not rewritten\n")


def test_dev_why_is_why_with_the_local_operators_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """`dev why` compares with what the local cluster's operator builds (its runtime table and
    initializer image), so the tutorial's `why` shows no change that operator would not make."""
    from mlops_platform import why
    from mlops_platform.devcluster import cluster, demo
    from mlops_platform.devcluster.realnode import images

    seen: list[tuple[Any, ...]] = []

    async def collect(*args: Any, **kwargs: Any) -> Any:
        seen.append(args)
        raise why.WhyError("recorded")

    monkeypatch.setattr(why, "collect", collect)
    result = CliRunner().invoke(cli.main, ["dev", "why", "--name", "c1", "iris", "-n", "ml"])
    assert result.exit_code == 1 and "recorded" in result.output, result.output
    kubeconfig, context, namespace, name, ctx = seen[0]
    assert (kubeconfig, context, namespace, name) == (str(cluster.kubeconfig_path("c1")), None, "ml", "iris")
    assert ctx.storage_initializer_image == images.OPERATOR.ref
    assert ctx.scrape_interval == demo.local_settings().scrape_interval == demo.SCRAPE_INTERVAL
    assert ctx.servers == demo.local_settings().servers
    assert ctx.servers["seldon"].image == "mlops.local/mlserver:1.7.1"


def test_dev_build_images_builds_without_a_cluster_and_names_unknown_images(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What `make demo` runs beside the Go builds: each named image's archive, no cluster needed."""
    from mlops_platform.devcluster.realnode import imagebuild

    built: list[str] = []

    def archive(recipe: imagebuild.Recipe) -> Path:
        built.append(recipe.name)
        return tmp_path / f"{recipe.name}.tar"

    monkeypatch.setattr(imagebuild, "archive", archive)
    result = CliRunner().invoke(cli.main, ["dev", "build-images", "mlserver", "mlops-platform"])
    assert result.exit_code == 0, result.output
    assert built == ["mlserver", "mlops-platform"]
    assert result.output.split() == [str(tmp_path / "mlserver.tar"), str(tmp_path / "mlops-platform.tar")]
    result = CliRunner().invoke(cli.main, ["dev", "build-images", "mlserver", "torchserve"])
    assert result.exit_code == 1 and "no local image torchserve: the images are pause" in result.output
    assert built == ["mlserver", "mlops-platform"]  # nothing built when a name is unknown
