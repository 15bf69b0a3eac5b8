"""The ``mlops-platform`` command line."""

from __future__ import annotations

import json
import sys

import click

from mlops_platform import __version__


@click.group()
@click.version_option(__version__, prog_name="mlops-platform")
def main() -> None:
    """mlops-platform: one InferenceService manifest -> a converged model-inference service."""


@main.group()
def dev() -> None:
    """The local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok nodes)."""


_name = click.option("--name", default="mlops-dev", show_default=True, help="cluster name")


@dev.command()
@_name
@click.option(
    "--without-crds", is_flag=True, help="leave the third-party CRDs out (optional-CRD-absent tests)"
)
@click.option("--wait", default=180.0, show_default=True, help="seconds to wait for readiness")
def up(name: str, without_crds: bool, wait: float) -> None:
    """Start the local cluster (idempotent) and print its kubeconfig path."""
    from mlops_platform.devcluster import cluster

    click.echo(cluster.up(name, install_crds=not without_crds, wait=wait))


@dev.command()
@_name
def down(name: str) -> None:
    """Stop and delete the local cluster; no process is left behind."""
    from mlops_platform.devcluster import cluster

    cluster.down(name)


@dev.command()
@_name
def status(name: str) -> None:
    """Print the cluster's state as JSON (exit 1 when its API server is not ready)."""
    from mlops_platform.devcluster import cluster

    st = cluster.status(name)
    click.echo(json.dumps(st, indent=2))
    sys.exit(0 if st["apiserver_ready"] else 1)


@dev.command()
@_name
def kubeconfig(name: str) -> None:
    """Print the kubeconfig path (export KUBECONFIG=$(mlops-platform dev kubeconfig))."""
    from mlops_platform.devcluster import cluster

    if not cluster.exists(name):
        raise click.ClickException(
            f"cluster {name!r} does not exist; run `mlops-platform dev up --name {name}`"
        )
    click.echo(cluster.kubeconfig_path(name))


@dev.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_name
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def kubectl(name: str, args: tuple[str, ...]) -> None:
    """Run the pinned kubectl against the cluster."""
    from mlops_platform.devcluster import cluster

    sys.exit(cluster.kubectl(name, list(args)))


@dev.command()
def build() -> None:
    """Build (or find cached) control-plane binaries and print their paths."""
    from mlops_platform.devcluster import binaries

    for name, path in binaries.find().paths.items():
        click.echo(f"{name}\t{path}")
