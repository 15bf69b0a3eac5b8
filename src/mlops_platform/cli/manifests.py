"""``mlops-platform manifests``: the install set (Namespace, CRD, RBAC, Deployments, PDB, Services)."""

from __future__ import annotations

import re

import click

_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION = re.compile(r"(?P<key>[^=:\s]+)(=(?P<value>[^:\s]*))?:(?P<effect>\w+)")


def _node_selector(values: tuple[str, ...]) -> dict[str, str] | None:
    """``KEY=VALUE`` pairs; None (the default selector) when none is given."""
    if not values:
        return None
    out = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r}: KEY=VALUE", param_hint="--node-selector")
        out[key] = value
    return out


def _tolerations(values: tuple[str, ...]) -> list[dict[str, object]]:
    """``KEY[=VALUE]:EFFECT``, as ``kubectl taint`` writes a taint: Equal with a value, else Exists."""
    out: list[dict[str, object]] = []
    for item in values:
        m = _TOLERATION.fullmatch(item)
        if m is None or m["effect"] not in _EFFECTS:
            raise click.BadParameter(
                f"{item!r}: KEY[=VALUE]:EFFECT, EFFECT one of {', '.join(_EFFECTS)}",
                param_hint="--toleration",
            )
        if m["value"] is None:
            out.append({"key": m["key"], "operator": "Exists", "effect": m["effect"]})
        else:
            out.append({"key": m["key"], "operator": "Equal", "value": m["value"], "effect": m["effect"]})
    return out


@click.command()
@click.option("--namespace", default="mlops-system", help="the operator's namespace")
@click.option(
    "--watch-namespace", "watch_namespaces", multiple=True, help="watch only these (namespaced RBAC)"
)
@click.option("--image", default=None, help="operator image (default: mlops-platform:<version>)")
@click.option("--replicas", default=2)
@click.option(
    "--node-selector",
    "node_selector",
    multiple=True,
    help="KEY=VALUE the operator's pods select (repeatable; replaces the default kubernetes.io/os=linux)",
)
@click.option(
    "--toleration",
    "tolerations",
    multiple=True,
    help="KEY[=VALUE]:EFFECT a taint the operator's pods tolerate (repeatable)",
)
@click.option(
    "--activator/--no-activator",
    default=None,
    help="the activator, which wakes a model KEDA scaled to zero on its first request "
    "(default: with a cluster-wide operator; it watches every namespace, so not with --watch-namespace)",
)
def manifests(
    namespace: str,
    watch_namespaces: tuple[str, ...],
    image: str | None,
    replicas: int,
    node_selector: tuple[str, ...],
    tolerations: tuple[str, ...],
    activator: bool | None,
) -> None:
    """Print the full install set (Namespace, CRD, RBAC, Deployments, PDB, Services) as YAML."""
    from mlops_platform.deploy import builders, defaults
    from mlops_platform.deploy import manifests as m

    if activator and watch_namespaces:
        raise click.UsageError("--activator watches every namespace: not with --watch-namespace")
    click.echo(
        m.render(
            namespace=namespace,
            watch_namespaces=list(watch_namespaces) or None,
            image=image or defaults.DEFAULT_IMAGE,
            replicas=replicas,
            node_selector=_node_selector(node_selector) or builders.NODE_SELECTOR,
            tolerations=_tolerations(tolerations),
            activator=activator,
        ),
        nl=False,
    )
