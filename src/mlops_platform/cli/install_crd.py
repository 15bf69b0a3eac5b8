"""``mlops-platform install-crd``: the InferenceService CRD, converted by the operator's webhook at a
URL the API server reaches (an operator run outside the cluster) or behind the in-cluster Service."""

from __future__ import annotations

import asyncio
import shlex
from typing import TYPE_CHECKING

import click

from mlops_platform.cli import options, webhook

if TYPE_CHECKING:  # imported when the command runs: the CLI starts fast
    from mlops_platform.deploy import crdinstall


def _check_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from mlops_platform.deploy import crdinstall

    try:
        crdinstall.parse_webhook_url(value)
    except ValueError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from None
    return value


def _check_secret(ctx: click.Context, param: click.Parameter, value: str) -> str:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise click.BadParameter(f"{value!r}: expected NAMESPACE/NAME", ctx=ctx, param=param)
    return value


@click.command(name="install-crd")
@options.kubeconfig_options(options.KUBECONFIG_DEFAULT)
@click.option(
    "--webhook-url",
    metavar="URL",
    callback=_check_url,
    help="where the API server calls the conversion webhook: https://HOST:PORT/convert, HOST this "
    "machine as the API server reaches it (127.0.0.1 when the API server runs on this machine); "
    "default: the in-cluster Service mlops-system/mlops-platform-webhook (docs/install.md)",
)
@click.option(
    "--webhook-secret",
    default=webhook.SECRET_DEFAULT,
    callback=_check_secret,
    metavar="NAMESPACE/NAME",
    help="the Secret `run --webhook-secret` keeps the webhook's certificate in: its namespace is "
    "created if missing",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0, min_open=True),
    default=60.0,
    help="seconds to wait until the CRD is Established",
)
def install_crd(
    kubeconfig: str | None, context: str | None, webhook_url: str | None, webhook_secret: str, timeout: float
) -> None:
    """Server-side apply the InferenceService CRD (every served version, converted by the operator's
    webhook) and wait until it is Established; create the namespace of the webhook's certificate
    Secret if missing; print the `mlops-platform run` flags that match --webhook-url.

    Safe to run again: a CA bundle the operator injected is kept, and a CRD pointing at the
    in-cluster Service (`kubectl apply -f config/crd/bases`) is re-pointed at the URL."""
    from mlops_platform.api import CRD_NAME
    from mlops_platform.deploy import crdinstall
    from mlops_platform.runtime.transport import client as rclient

    async def install() -> crdinstall.Installed:
        async with rclient.Client.from_kubeconfig(kubeconfig, context=context) as c:
            return await crdinstall.install(
                c, webhook_url=webhook_url, secret_namespace=webhook_secret.partition("/")[0], timeout=timeout
            )

    try:
        done = asyncio.run(install())
    except TimeoutError:
        raise click.ClickException(f"{CRD_NAME}: applied, not Established within {timeout:.0f}s") from None
    except (rclient.ApiError, rclient.TransportError, OSError) as e:
        raise click.ClickException(f"{CRD_NAME}: {e}") from None
    click.echo("\n".join(report(done, webhook_secret, kubeconfig=kubeconfig, context=context)))


def report(
    done: crdinstall.Installed, secret: str, *, kubeconfig: str | None = None, context: str | None = None
) -> list[str]:
    """What ``install-crd`` did, and how to run the operator to match, as lines for the user."""
    from mlops_platform.deploy import crdinstall

    versions = [v["name"] for v in done.crd["spec"]["versions"] if v.get("served")]
    storage = next(v["name"] for v in done.crd["spec"]["versions"] if v.get("storage"))
    now = crdinstall.describe(crdinstall.client_config(done.crd))
    lines = [
        f"applied CustomResourceDefinition {done.crd['metadata']['name']}: Established, serving "
        f"{', '.join(versions)} (storage {storage})",
        f"conversion webhook: {now}"
        + (f" (was {done.previous})" if done.previous and done.previous != now else ""),
    ]
    namespace = secret.partition("/")[0]
    state = "created" if namespace in done.created_namespaces else "exists"
    lines.append(f"namespace {namespace}: {state} (the webhook's certificate Secret {secret} goes there)")
    lines.append(
        "caBundle: kept (the operator replaces it with its own CA's if it differs)"
        if done.ca_bundle
        else "caBundle: none yet (the operator injects its CA when it starts)"
    )
    if done.target is None:
        lines.append(
            "The operator must run in the cluster, behind that Service (docs/install.md); "
            "an operator outside the cluster needs --webhook-url."
        )
        return lines
    lines += [
        "Run the operator with:",
        "  " + shlex.join(run_command(done.target, secret, kubeconfig, context)),
    ]
    if not done.target.ip:
        lines.append(
            f"  ({done.target.host} must resolve to this machine for the API server; "
            f"--webhook-bind-address 0.0.0.0:{done.target.port} listens on every interface)"
        )
    return lines


def run_command(
    target: crdinstall.Target, secret: str, kubeconfig: str | None, context: str | None
) -> list[str]:
    """``mlops-platform run`` with the flags that serve the webhook at ``target``: listening at its
    address (every interface for a DNS name), its host in the serving certificate (127.0.0.1 always
    is), the same Secret and cluster."""
    cmd = ["mlops-platform", "run"]
    if kubeconfig:
        cmd += ["--kubeconfig", kubeconfig]
    if context:
        cmd += ["--context", context]
    if target.ip:
        host = f"[{target.host}]" if ":" in target.host else target.host
        cmd += ["--webhook-bind-address", f"{host}:{target.port}"]
        if target.host != "127.0.0.1":
            cmd += ["--webhook-ip-address", target.host]
    else:
        cmd += ["--webhook-bind-address", f"0.0.0.0:{target.port}", "--webhook-dns-name", target.host]
    if secret != webhook.SECRET_DEFAULT:
        cmd += ["--webhook-secret", secret]
    return cmd
