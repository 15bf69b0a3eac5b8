"""``mlops-platform manifests``: the install set (Namespace, CRD, RBAC, Deployment, PDB, Service)."""

from __future__ import annotations

import click


@click.command()
@click.option("--namespace", default="mlops-system", help="the operator's namespace")
@click.option(
    "--watch-namespace", "watch_namespaces", multiple=True, help="watch only these (namespaced RBAC)"
)
@click.option("--image", default=None, help="operator image (default: mlops-platform:<version>)")
@click.option("--replicas", default=2)
def manifests(namespace: str, watch_namespaces: tuple[str, ...], image: str | None, replicas: int) -> None:
    """Print the full install set (Namespace, CRD, RBAC, Deployment, PDB, Service) as YAML."""
    from mlops_platform.deploy import manifests as m

    kwargs = {"image": image} if image else {}
    click.echo(
        m.render(
            namespace=namespace, watch_namespaces=list(watch_namespaces) or None, replicas=replicas, **kwargs
        ),
        nl=False,
    )
