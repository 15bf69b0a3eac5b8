"""The shape every child module follows (one module per child kind, KServe style).

A :class:`Child` bundles three pure functions with the same signatures for every kind:

- ``name(isvc) -> str``: the child's name (also when it is not desired, so a stale one is found);
- ``build(isvc, ctx) -> dict | None``: the desired object with apiVersion, kind, metadata (name,
  namespace, labels, annotations) and spec; ``None`` means "not desired": the reconciler deletes
  the live one it owns. A disabled feature is a child returning ``None``, never an ``if`` in the
  controller. Owner references are added by the reconciler, not here.
- ``condition(isvc, desired, live) -> ChildCondition``: the child's status condition computed from
  the live object's status (``live`` is ``None`` when it does not exist yet).

Nothing here does I/O: same inputs, same output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal

from mlops_platform.api import v1alpha1
from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.runtimes import RuntimeSpec, RuntimeTable, default_table
from mlops_platform.runtime.client import Resource

Obj = dict[str, Any]
Status = Literal["True", "False", "Unknown"]


@dataclasses.dataclass(frozen=True, slots=True)
class BuildContext:
    """What builders need besides the CR: the runtime table and operator-wide settings."""

    runtimes: RuntimeTable = dataclasses.field(default_factory=default_table)
    cluster_domain: str = "cluster.local"

    def runtime(self, isvc: v1alpha1.InferenceService) -> RuntimeSpec:
        """The runtime of the CR's framework (``KeyError`` naming it if the table lacks it)."""
        try:
            return self.runtimes[isvc.spec.framework]
        except KeyError:
            raise KeyError(f"no runtime for framework {isvc.spec.framework!r}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class ChildCondition:
    """One child's condition on the InferenceService status (reason is CamelCase)."""

    type: str
    status: Status
    reason: str
    message: str = ""

    def to_condition(self, observed_generation: int | None = None) -> v1alpha1.Condition:
        return v1alpha1.Condition(
            type=self.type,
            status=self.status,
            reason=self.reason,
            message=self.message,
            observed_generation=observed_generation,
        )


NameFn = Callable[[v1alpha1.InferenceService], str]
BuildFn = Callable[[v1alpha1.InferenceService, BuildContext], Obj | None]
ConditionFn = Callable[[v1alpha1.InferenceService, Obj | None, Obj | None], ChildCondition]
SettleFn = Callable[[v1alpha1.InferenceService, Obj, Obj | None], None]


@dataclasses.dataclass(frozen=True, slots=True)
class Child:
    """One child kind: where it lives in the API and its pure functions.

    ``settle(isvc, desired, live)``, when set, adjusts the desired object to the live one AFTER the
    reconciler hashed it: for fields another controller drives (the HPA's replica count), so their
    changes alone never cause a write. ``serving``: whether the child's condition gates ``Ready``.
    """

    resource: Resource
    condition_type: str
    name: NameFn
    build: BuildFn
    condition: ConditionFn
    settle: SettleFn | None = None
    serving: bool = True


# -- helpers shared by the child modules ---------------------------------------------------------


def autoscaled(isvc: v1alpha1.InferenceService) -> bool:
    """An HPA owns the replica count: ``maxReplicas > minReplicas >= 1``."""
    return isvc.spec.max_replicas > isvc.spec.min_replicas >= 1


def metadata(
    isvc: v1alpha1.InferenceService,
    ctx: BuildContext,
    name: str,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """``metadata`` of a child: name, namespace, the common labels and optional annotations."""
    meta: Obj = {
        "name": name,
        "namespace": isvc.namespace,
        "labels": labels.child_labels(isvc, ctx.runtime(isvc).server),
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def find_condition(obj: Obj | None, type_: str) -> Obj | None:
    """The ``status.conditions`` entry of ``type_`` in a live object."""
    for cond in ((obj or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_:
            return dict(cond)
    return None


def not_found(type_: str, resource: Resource, name: str) -> ChildCondition:
    """The condition of a desired child that does not exist (yet)."""
    return ChildCondition(type_, "Unknown", "Pending", f"{resource.kind} {name} does not exist yet")
