"""The NetworkPolicy ``<name>`` (``networking.k8s.io/v1``): who may reach the model-server pods.

Contract of :func:`build` (pure): desired when turned on for the InferenceService
(``spec.extensions.networkPolicy.enabled``) or by the operator default (off). It selects the pods
of every component of this InferenceService and of nothing else (:func:`labels.service_selector`)
and allows ingress:
- on the serving ports (``http`` and the runtime's other exposed ports but ``metrics``, by name)
  from pods of the same namespace and, when configured, from namespaces matching the operator's
  ingress namespace labels (mesh or ingress gateways);
- on the ``metrics`` port only from the monitoring namespace (``kubernetes.io/metadata.name``).
Egress is unrestricted unless the operator is given egress CIDRs: then only those, plus DNS.
``NetworkPolicyReady`` does not gate ``Ready``.
"""

from __future__ import annotations

from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import base, service
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.transport import resources

CONDITION = "NetworkPolicyReady"
KIND = kinds.Kind.of(resources.NETWORK_POLICY)
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


name = base.service_name


def enabled(target: base.Target, ctx: base.BuildContext) -> bool:
    return base.enabled(target.isvc.network_policy.enabled, ctx.network_policy)


def build(target: base.Target, ctx: base.BuildContext) -> base.Obj | None:
    if not enabled(target, ctx):
        return None
    isvc = target.isvc
    rt = ctx.server(isvc)
    serving = ["http", *(n for n in rt.ports if n != service.METRICS_PORT)]
    peers: list[base.Obj] = [{"podSelector": {}}]
    if ctx.ingress_namespace_labels:
        peers.append({"namespaceSelector": {"matchLabels": dict(ctx.ingress_namespace_labels)}})
    ingress: list[base.Obj] = [{"from": peers, "ports": [{"protocol": "TCP", "port": p} for p in serving]}]
    if service.METRICS_PORT in rt.ports:
        monitoring = {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: ctx.monitoring_namespace}}}
        ingress.append({"from": [monitoring], "ports": [{"protocol": "TCP", "port": service.METRICS_PORT}]})
    spec: base.Obj = {
        "podSelector": {"matchLabels": labels.service_selector(isvc)},
        "policyTypes": ["Ingress"],
        "ingress": ingress,
    }
    if ctx.egress_cidrs:
        spec["policyTypes"].append("Egress")
        dns = [{"protocol": proto, "port": 53} for proto in ("UDP", "TCP")]
        spec["egress"] = [{"to": [{"ipBlock": {"cidr": c}} for c in ctx.egress_cidrs]}, {"ports": dns}]
    return {
        "apiVersion": resources.NETWORK_POLICY.api_version,
        "kind": resources.NETWORK_POLICY.kind,
        "metadata": base.metadata(target, ctx, name(target), per_component=False),
        "spec": spec,
    }


def condition(
    target: base.Target, ctx: base.BuildContext, desired: base.Obj | None, live: base.Obj | None
) -> base.ChildCondition:
    if desired is None:
        where = (
            "spec.extensions.networkPolicy.enabled"
            if target.isvc.network_policy.enabled is False
            else "the operator's default (--network-policy)"
        )
        return base.ChildCondition(CONDITION, "True", "NotRequested", f"no NetworkPolicy: off by {where}")
    if live is None:
        return base.not_found(CONDITION, KIND, name(target))
    return base.ChildCondition(CONDITION, "True", "PolicyApplied", f"NetworkPolicy {name(target)} applied")


RBAC = base.child_rbac(
    KIND, why="the NetworkPolicy of an InferenceService: watched (owns), applied, repaired, deleted"
)
CHILD = base.Child(
    "networkpolicy", KIND, CONDITION, name, build, condition, serving=False, per_component=False
)
