"""One module per child kind, each a pure ``build(target, ctx) -> dict | None``.

Every module exposes its :class:`base.Child` (``CHILD``, or ``RULE``/``MONITOR`` for the two
monitoring kinds); :data:`CHILDREN` lists them in slot order: the Deployment first, then the Service in
front of it, the HPA or KEDA ScaledObject that scales it (each for the predictor, then for a
canary), the routes of the
Istio and Gateway API routers, the network policy, and the optional monitoring kinds last.
A reconcile writes them in parallel and reports them (status, Event, log) in this order.
"""

from mlops_platform.controllers.inferenceservice.children import (
    base,
    deployment,
    hpa,
    httproute,
    monitoring,
    networkpolicy,
    scaledobject,
    service,
    virtualservice,
)

CHILDREN: tuple[base.Child, ...] = (
    deployment.CHILD,
    service.CHILD,
    hpa.CHILD,
    scaledobject.CHILD,
    virtualservice.CHILD,
    httproute.CHILD,
    networkpolicy.CHILD,
    monitoring.RULE,
    monitoring.MONITOR,
)

__all__ = [
    "CHILDREN",
    "base",
    "deployment",
    "hpa",
    "httproute",
    "monitoring",
    "networkpolicy",
    "scaledobject",
    "service",
    "virtualservice",
]
