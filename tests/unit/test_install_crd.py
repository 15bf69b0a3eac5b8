"""``mlops-platform install-crd``: bad input is a usage error naming the flag; what it prints (the
matching ``run`` flags); ``deploy.crdinstall``'s namespace and re-pointing steps on a fake client;
and ``--webhook-ip-address`` reaching the serving certificate's IP SANs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.unit.test_cli import WEBHOOK_FLAGS

from mlops_platform import cli
from mlops_platform.api import CRD_NAME, crd
from mlops_platform.cli import install_crd, webhook
from mlops_platform.deploy import crdinstall
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes
from mlops_platform.webhooks import serve

URL = "https://127.0.0.1:9443/convert"


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli.main, ["install-crd", *args])


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:9443/convert", "is not https://... (the API server calls webhooks over TLS only)"),
        ("https:///convert", "has no host"),
        (
            "https://127.0.0.1:9443/",
            "the path must be /convert (where the operator serves conversions), not '/'",
        ),
        ("https://127.0.0.1:9443", "the path must be /convert"),
        ("https://127.0.0.1:9443/convert/x", "not '/convert/x'"),
        ("https://127.0.0.1:99999/convert", "Port out of range"),
        ("https://127.0.0.1:0/convert", "port 0"),
        ("https://u:p@127.0.0.1:9443/convert", "has user info"),
        ("https://127.0.0.1:9443/convert?x=1", "has a query or fragment"),
        ("https://127.0.0.1:9443/convert#x", "has a query or fragment"),
        ("https://bad_host:9443/convert", "host 'bad_host' is neither an IP address nor a DNS name"),
        ("https://[::1/convert", "Invalid IPv6 URL"),
    ],
)
def test_a_bad_webhook_url_is_a_usage_error_naming_the_flag(url: str, says: str) -> None:
    result = invoke("--webhook-url", url)
    assert result.exit_code == 2, result.output
    assert "Error: Invalid value for '--webhook-url': " in result.output
    assert says in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("secret", ["nameonly", "/name", "ns/", "a/b/c"])
def test_a_bad_webhook_secret_is_a_usage_error_naming_the_flag(secret: str) -> None:
    result = invoke("--webhook-url", URL, "--webhook-secret", secret)
    assert result.exit_code == 2, result.output
    assert (
        f"Error: Invalid value for '--webhook-secret': {secret!r}: expected NAMESPACE/NAME" in result.output
    )


def test_an_unusable_kubeconfig_names_the_flag(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = invoke("--kubeconfig", str(missing), "--webhook-url", URL)
    assert result.exit_code == 2, result.output
    assert f"Error: --kubeconfig {missing}: cannot read it" in result.output


@pytest.mark.parametrize(
    ("url", "flags"),
    [
        (URL, ["--webhook-bind-address", "127.0.0.1:9443"]),
        ("https://127.0.0.1/convert", ["--webhook-bind-address", "127.0.0.1:443"]),
        (
            "https://dev-box.example.com:9443/convert",
            ["--webhook-bind-address", "0.0.0.0:9443", "--webhook-dns-name", "dev-box.example.com"],
        ),
        (
            "https://172.18.0.1:9443/convert",
            ["--webhook-bind-address", "172.18.0.1:9443", "--webhook-ip-address", "172.18.0.1"],
        ),
        (
            "https://[::1]:9443/convert",
            ["--webhook-bind-address", "[::1]:9443", "--webhook-ip-address", "::1"],
        ),
    ],
)
def test_the_run_command_serves_the_webhook_where_the_url_says(url: str, flags: list[str]) -> None:
    target = crdinstall.parse_webhook_url(url)
    assert install_crd.run_command(target, webhook.SECRET_DEFAULT, None, None) == [
        "mlops-platform",
        "run",
        *flags,
    ]
    # the flags run takes, with the same Secret and cluster
    assert install_crd.run_command(target, "ns/s", "k.yaml", "ctx") == [
        "mlops-platform", "run", "--kubeconfig", "k.yaml", "--context", "ctx",
        *flags, "--webhook-secret", "ns/s",
    ]  # fmt: skip


def installed(url: str | None, *, created: tuple[str, ...] = (), previous: str | None = None) -> Any:
    live = crd.crd_manifest(webhook_url=url)
    if previous is not None:
        live["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] = "Q0E="
    return crdinstall.Installed(
        crd=live,
        target=crdinstall.parse_webhook_url(url) if url else None,
        created_namespaces=created,
        previous=previous,
        ca_bundle=previous is not None,
    )


def test_it_prints_what_it_did_and_the_run_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    async def install(client: Any, **kwargs: Any) -> Any:
        seen.update(kwargs)
        return installed(URL, created=("mlops-system",), previous="the Service mlops-system/x:443/convert")

    monkeypatch.setattr(crdinstall, "install", install)
    kubeconfig = tmp_path / "k.yaml"
    kubeconfig.write_text(KUBECONFIG)
    result = invoke("--kubeconfig", str(kubeconfig), "--webhook-url", URL)
    assert result.exit_code == 0, result.output
    assert seen == {"webhook_url": URL, "secret_namespace": "mlops-system", "timeout": 60.0}
    assert result.output.splitlines() == [
        f"applied CustomResourceDefinition {CRD_NAME}: Established, serving v1alpha1, v1beta1, v1 "
        "(storage v1)",
        f"conversion webhook: {URL} (was the Service mlops-system/x:443/convert)",
        "namespace mlops-system: created (the webhook's certificate Secret "
        "mlops-system/mlops-platform-webhook-tls goes there)",
        "caBundle: kept (the operator replaces it with its own CA's if it differs)",
        "Run the operator with:",
        f"  mlops-platform run --kubeconfig {kubeconfig} --webhook-bind-address 127.0.0.1:9443",
    ]


def test_without_a_url_the_operator_is_the_in_cluster_one() -> None:
    lines = install_crd.report(installed(None), webhook.SECRET_DEFAULT)
    assert lines[1] == "conversion webhook: the Service mlops-system/mlops-platform-webhook:443/convert"
    assert lines[2].startswith("namespace mlops-system: exists")
    assert lines[3] == "caBundle: none yet (the operator injects its CA when it starts)"
    assert "in the cluster" in lines[-1] and "--webhook-url" in lines[-1]


def test_a_dns_name_says_where_it_must_resolve() -> None:
    lines = install_crd.report(installed("https://dev-box.example.com:9443/convert"), webhook.SECRET_DEFAULT)
    assert lines[-1] == (
        "  (dev-box.example.com must resolve to this machine for the API server; "
        "--webhook-bind-address 0.0.0.0:9443 listens on every interface)"
    )


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


# -- deploy.crdinstall on a fake client ----------------------------------------------------------


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> fakes.FakeClient:
    c = fakes.FakeClient()

    async def install(client: Any, *, webhook_url: str | None, timeout: float) -> dict[str, Any]:
        live = crd.crd_manifest(webhook_url=webhook_url)
        await client.apply(resources.CRD, live, field_manager="test")
        return live

    monkeypatch.setattr(crd, "install", install)
    return c


async def test_the_secret_namespace_is_created_once(client: fakes.FakeClient) -> None:
    first = await crdinstall.install(client, webhook_url=URL, namespaces=("mlops-demo", "mlops-system"))
    again = await crdinstall.install(client, webhook_url=URL, namespaces=("mlops-demo",))
    assert first.created_namespaces == ("mlops-system", "mlops-demo")
    assert again.created_namespaces == ()
    assert again.previous == URL and not again.ca_bundle
    assert [k for k in client.keys if k[0] == "create"] == [
        ("create", "namespaces", "mlops-system", None),
        ("create", "namespaces", "mlops-demo", None),
    ]


async def test_a_crd_pointing_at_the_service_is_repointed_in_one_patch(client: fakes.FakeClient) -> None:
    await client.apply(resources.CRD, crd.crd_manifest(), field_manager="kubectl")  # the committed file
    done = await crdinstall.install(client, webhook_url=URL)
    assert done.previous == "the Service mlops-system/mlops-platform-webhook:443/convert"
    (patch,) = [c for c in client.calls if c.verb == "patch"]
    assert patch.body == {
        "spec": {"conversion": {"webhook": {"clientConfig": {"url": URL, "service": None}}}}
    }
    # and back: a URL CRD pointed at the Service again
    client.reset_calls()
    await crdinstall.install(client, webhook_url=None)
    (patch,) = [c for c in client.calls if c.verb == "patch"]
    service = crd.conversion()["webhook"]["clientConfig"]["service"]
    assert patch.body == {
        "spec": {"conversion": {"webhook": {"clientConfig": {"service": service, "url": None}}}}
    }
    # the same kind of webhook needs no patch: the apply changes the URL
    client.reset_calls()
    await crdinstall.install(client, webhook_url=None)
    assert [c for c in client.calls if c.verb == "patch"] == []


async def test_a_bad_url_fails_before_anything_is_written(client: fakes.FakeClient) -> None:
    with pytest.raises(ValueError, match="is not https"):
        await crdinstall.install(client, webhook_url="http://127.0.0.1/convert")
    assert client.calls == []


# -- --webhook-ip-address and --webhook-secret's default -------------------------------------------


def test_webhook_ip_addresses_join_127_0_0_1_in_the_certificate() -> None:
    flags = dataclasses.replace(
        WEBHOOK_FLAGS, webhook_ip_addresses=("172.18.0.1", "127.0.0.1"), webhook_dns_names=("a.example",)
    )
    hook = webhook.build(fakes.FakeClient(), flags, None)
    assert hook.options.ip_addresses == ("127.0.0.1", "172.18.0.1")
    assert hook.options.dns_names == ("a.example",)
    assert webhook.build(fakes.FakeClient(), WEBHOOK_FLAGS, None).options.ip_addresses == ("127.0.0.1",)


def test_a_bad_webhook_ip_address_is_a_usage_error_naming_the_flag() -> None:
    result = CliRunner().invoke(cli.main, ["webhook", "--webhook-ip-address", "dev-box"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--webhook-ip-address': 'dev-box' does not appear to be an IPv4 or IPv6" in (
        result.output
    )


def test_the_secret_default_is_the_webhooks() -> None:
    assert "/".join(serve.SECRET) == webhook.SECRET_DEFAULT
