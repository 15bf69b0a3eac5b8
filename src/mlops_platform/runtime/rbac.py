"""Permissions declared where they are used (like kubebuilder's ``+kubebuilder:rbac`` markers).

Every module that reads or writes a kind calls :func:`requires` at import time, next to the code
that makes the requests::

    rbac.requires("apps", "deployments", ["get", "list", "watch", "create", "patch", "delete"],
                  why="the predictor Deployment")

The generator (``mlops_platform.deploy.rbac``) turns :func:`declared` into Roles/ClusterRoles, and
tests compare the requests the operator actually made (``Client.requests``) with :func:`covers`.

Scopes: ``"watched"`` rules apply where the operator watches objects (cluster-wide, or each watched
namespace); ``"leader-election"`` rules apply only in the leader-election namespace; ``"cluster"``
rules are about cluster-scoped kinds (CustomResourceDefinitions) and are cluster-wide in every
install mode.

``resource_names`` limits a rule to named objects (``resourceNames`` in the PolicyRule): only for
verbs that address one object (``get``, ``update``, ``patch``, ``delete``); ``create``, ``list`` and
``watch`` cannot be limited by name, so declare them in a separate rule without names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Literal

Scope = Literal["watched", "leader-election", "cluster"]
VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"})
#: the verbs ``resourceNames`` can restrict (the others have no object name in the request)
NAMABLE_VERBS = frozenset({"get", "update", "patch", "delete"})


@dataclasses.dataclass(frozen=True, order=True)
class Rule:
    group: str
    resource: str  # may carry a subresource: "inferenceservices/status"
    verbs: tuple[str, ...]
    scope: Scope = "watched"
    resource_names: tuple[str, ...] = ()
    why: str = dataclasses.field(default="", compare=False)

    @property
    def name(self) -> str:
        """A stable id: ``deployments.apps``, ``inferenceservices.mlops.platform/status``, ``pods``."""
        base, _, sub = self.resource.partition("/")
        gr = f"{base}.{self.group}" if self.group else base
        return f"{gr}/{sub}" if sub else gr


_DECLARED: list[Rule] = []


def requires(
    group: str,
    resource: str,
    verbs: Iterable[str],
    *,
    why: str,
    scope: Scope = "watched",
    resource_names: Iterable[str] = (),
) -> Rule:
    """Declare that this code needs ``verbs`` on ``group``/``resource`` (only the objects named
    ``resource_names``, when given); returns the rule."""
    vs = tuple(sorted(set(verbs)))
    unknown = set(vs) - VERBS
    if unknown:
        raise ValueError(f"unknown verbs {sorted(unknown)} for {resource}")
    names = tuple(sorted(set(resource_names)))
    unnamable = set(vs) - NAMABLE_VERBS if names else set()
    if unnamable:
        raise ValueError(f"{sorted(unnamable)} on {resource} cannot be limited by resourceNames")
    rule = Rule(group, resource, vs, scope, names, why)
    _DECLARED.append(rule)
    return rule


def declared() -> list[Rule]:
    """All declarations, merged per (group, resource, scope, resource_names), sorted."""
    merged: dict[tuple[str, str, str, tuple[str, ...]], tuple[set[str], list[str]]] = {}
    for r in _DECLARED:
        verbs, whys = merged.setdefault((r.group, r.resource, r.scope, r.resource_names), (set(), []))
        verbs.update(r.verbs)
        if r.why and r.why not in whys:
            whys.append(r.why)
    return sorted(
        Rule(g, res, tuple(sorted(v)), scope, names, "; ".join(w))  # type: ignore[arg-type]
        for (g, res, scope, names), (v, w) in merged.items()
    )


def covers(rules: Iterable[Rule], verb: str, group_resource: str) -> bool:
    """Whether ``rules`` allow ``verb`` on ``group_resource`` (as :class:`Client` records it:
    ``deployments.apps``, ``inferenceservices.mlops.platform/status``, ``pods``). Resource names
    are ignored: a request is recorded without the object's name."""
    return any(r.name == group_resource and verb in r.verbs for r in rules)
