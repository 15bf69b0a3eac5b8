"""The install set in apply order (:func:`install_objects`) and as one multi-document YAML
(:func:`render`): a manager (ServiceAccount, RBAC, Deployment, PodDisruptionBudget) per watched
namespace, or one for the whole cluster, after the Namespace and the CRD; with a cluster-wide manager,
the activator (:mod:`~mlops_platform.deploy.activator`), which the manager's ``--activator`` names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mlops_platform.deploy import activator as activator_objects
from mlops_platform.deploy import builders, defaults, rbac
from mlops_platform.runtime import generated
from mlops_platform.runtime.objects import Obj


def _managers(watch_namespaces: Sequence[str] | None) -> tuple[list[tuple[str, str | None]], bool]:
    """(Deployment name, watched namespace) of each manager, and whether there are several."""
    if watch_namespaces is None:
        return [(defaults.NAME, None)], False
    if isinstance(watch_namespaces, str) or not watch_namespaces:
        raise ValueError(f"watch_namespaces must be a non-empty list (None: all), not {watch_namespaces!r}")
    if len(set(watch_namespaces)) != len(watch_namespaces):
        raise ValueError(f"duplicate watch namespaces: {list(watch_namespaces)}")
    if len(watch_namespaces) == 1:
        return [(defaults.NAME, watch_namespaces[0])], False
    return [(f"{defaults.NAME}-{ns}", ns) for ns in watch_namespaces], True


def install_objects(
    *,
    namespace: str = defaults.DEFAULT_NAMESPACE,
    watch_namespaces: Sequence[str] | None = None,
    image: str = defaults.DEFAULT_IMAGE,
    replicas: int = defaults.DEFAULT_REPLICAS,
    cert_manager: bool = False,
    resources: Mapping[str, Mapping[str, str]] = defaults.RESOURCES,
    node_selector: Mapping[str, str] = builders.NODE_SELECTOR,
    tolerations: Sequence[Mapping[str, object]] = (),
    activator: bool | None = None,
) -> list[Obj]:
    """Everything an install needs, in apply order (Namespace and CRD first).

    A PodDisruptionBudget (``minAvailable: 1``) comes with each manager when ``replicas >= 2``: with
    one replica it would forbid every voluntary eviction. ``cert_manager``: the webhook's
    certificate from cert-manager (which must be installed) instead of the operator's own.
    ``resources``: the manager container's requests and limits (:data:`defaults.RESOURCES`).
    ``node_selector`` / ``tolerations``: the manager pods' (:data:`builders.NODE_SELECTOR` / none;
    empty: the field left out). ``activator``: the activator (its own ServiceAccount, ClusterRole,
    Deployment and Service, on the operator's image and placement) and ``--activator`` on the
    manager, so that a model scaled to zero by KEDA is woken by its first request (docs/autoscaling.md);
    by default with a cluster-wide manager only: the activator watches every namespace.
    """
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, not {replicas}")
    if activator is None:
        activator = watch_namespaces is None
    elif activator and watch_namespaces is not None:
        raise ValueError("activator: it watches the whole cluster, not with watch_namespaces")
    managers, several = _managers(watch_namespaces)
    out: list[Obj] = [
        builders.namespace_object(namespace),
        builders.crd_object(namespace, cert_manager=cert_manager),
    ]
    for name, watch in managers:
        out += rbac.objects(
            namespace=namespace,
            watch_namespaces=None if watch is None else [watch],
            service_account=name,
            name=name,
        )
    if cert_manager:
        out += builders.cert_manager_objects(namespace)
    for name, watch in managers:
        out.append(
            builders.deployment(
                name=name,
                namespace=namespace,
                watch=watch,
                several=several,
                image=image,
                replicas=replicas,
                cert_manager=cert_manager,
                resources=resources,
                node_selector=node_selector,
                tolerations=tolerations,
                activator=f"{namespace}/{activator_objects.NAME}" if activator else None,
            )
        )
        if replicas >= 2:
            out.append(
                builders.pod_disruption_budget(
                    name=name, namespace=namespace, selector=builders.manager_selector(watch, several)
                )
            )
    out += [builders.metrics_service(namespace), builders.webhook_service(namespace)]
    if activator:
        placement = builders.placement(node_selector, tolerations)
        out += activator_objects.objects(namespace, image, placement=placement)
    return out


def render(
    namespace: str = defaults.DEFAULT_NAMESPACE,
    watch_namespaces: Sequence[str] | None = None,
    image: str = defaults.DEFAULT_IMAGE,
    replicas: int = defaults.DEFAULT_REPLICAS,
    node_selector: Mapping[str, str] = builders.NODE_SELECTOR,
    tolerations: Sequence[Mapping[str, object]] = (),
    activator: bool | None = None,
) -> str:
    """The install set as multi-document YAML, for ``kubectl apply --server-side -f -``."""
    objs = install_objects(
        namespace=namespace,
        watch_namespaces=watch_namespaces,
        image=image,
        replicas=replicas,
        node_selector=node_selector,
        tolerations=tolerations,
        activator=activator,
    )
    return defaults.HEADER + generated.dump(objs)
