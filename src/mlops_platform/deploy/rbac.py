"""Generate least-privilege RBAC from the declarations in the code (``runtime.rbac.requires``).

- Cluster mode (no ``watch_namespaces``): one ClusterRole + ClusterRoleBinding for the "watched"
  rules. Namespaced mode: a Role + RoleBinding with the same rules in EACH watched namespace, and
  nothing cluster-wide.
- Always: a Role + RoleBinding for the leader-election Lease in the operator's namespace, a
  ClusterRole + ClusterRoleBinding for the "cluster" rules (cluster-scoped kinds: list/watch of
  CustomResourceDefinitions to follow optional kinds in both modes, and get/patch of this
  operator's CRD only, by name, for the conversion webhook's CA bundle), and the ServiceAccount the
  operator runs as. The leader-election Role also holds the webhook's certificate Secret rules.
- One PolicyRule per declared (group, resource, resource names), so a single rule can be removed in
  tests; ``resourceNames`` when the declaration names the objects.
"""

from __future__ import annotations

from mlops_platform.runtime import rbac
from mlops_platform.runtime.objects import Obj

NAME = "mlops-platform"
DEFAULT_NAMESPACE = "mlops-system"


def declared_rules() -> list[rbac.Rule]:
    """Every rule the operator's code declares (importing the modules registers them)."""
    import mlops_platform.controllers.inferenceservice.controller
    import mlops_platform.runtime.control.manager
    import mlops_platform.webhooks.serve  # noqa: F401

    return rbac.declared()


def policy_rule(rule: rbac.Rule) -> Obj:
    out: Obj = {"apiGroups": [rule.group], "resources": [rule.resource]}
    if rule.resource_names:
        out["resourceNames"] = list(rule.resource_names)
    return {**out, "verbs": list(rule.verbs)}


def labels(component: str) -> dict[str, str]:
    """The labels of every install object, by component (rbac, manager, metrics...)."""
    return {
        "app.kubernetes.io/name": NAME,
        "app.kubernetes.io/part-of": NAME,
        "app.kubernetes.io/component": component,
    }


def objects(
    *,
    namespace: str = DEFAULT_NAMESPACE,
    watch_namespaces: list[str] | None = None,
    service_account: str = NAME,
    rules: list[rbac.Rule] | None = None,
    name: str = NAME,
) -> list[Obj]:
    """ServiceAccount, (Cluster)Roles and bindings for the operator, in apply order."""
    all_rules = declared_rules() if rules is None else rules
    watched = [policy_rule(r) for r in all_rules if r.scope == "watched"]
    election = [policy_rule(r) for r in all_rules if r.scope == "leader-election"]
    cluster = [policy_rule(r) for r in all_rules if r.scope == "cluster"]
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
    out: list[Obj] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": service_account, "namespace": namespace, "labels": labels("rbac")},
        }
    ]
    manager_role = f"{name}-manager"
    if watch_namespaces is None:
        out += _cluster_role_and_binding(manager_role, watched, subject)
    else:
        for ns in watch_namespaces:
            out += _role_and_binding(manager_role, ns, watched, subject)
    if cluster:
        out += _cluster_role_and_binding(f"{name}-cluster-reader", cluster, subject)
    out += _role_and_binding(f"{name}-leader-election", namespace, election, subject)
    return out


def _cluster_role_and_binding(role: str, rules: list[Obj], subject: Obj) -> list[Obj]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role, "labels": labels("rbac")},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role, "labels": labels("rbac")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [subject],
        },
    ]


def _role_and_binding(role: str, namespace: str, rules: list[Obj], subject: Obj) -> list[Obj]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": role, "namespace": namespace, "labels": labels("rbac")},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": role, "namespace": namespace, "labels": labels("rbac")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [subject],
        },
    ]
