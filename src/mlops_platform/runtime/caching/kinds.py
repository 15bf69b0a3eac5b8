"""Kinds whose REST version is resolved at run time, and kinds that may not exist at all.

A :class:`Kind` names a kind by group and plural and lists the versions the caller can read and
write (its builder's schema), most preferred first. Built-in kinds resolve statically to their
first version. An ``optional`` kind is served by a CustomResourceDefinition that may be absent,
appear or disappear while the process runs (:mod:`mlops_platform.runtime.caching.crdwatch` follows it).

Version choice (:func:`served_version`) follows the API server's own preference order for CRD
versions (``k8s.io/apimachinery/pkg/version.CompareKubeAwareVersionStrings``): GA before beta
before alpha, higher numbers first, then non-Kubernetes-like names alphabetically. The chosen
version is the most preferred *served* version that the caller also speaks, so a cluster that
serves ``gateway.networking.k8s.io`` at v1 or only at v1beta1 works with the same code.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from mlops_platform.runtime import objects
from mlops_platform.runtime.transport import apiextensions
from mlops_platform.runtime.transport.client import Resource

_KUBE_VERSION = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


@dataclasses.dataclass(frozen=True, slots=True)
class Kind:
    """A kind by group, kind and plural, with the versions its user speaks (preferred first)."""

    group: str
    kind: str
    plural: str
    versions: tuple[str, ...]
    namespaced: bool = True
    #: defined by a CRD that may be missing (never blocks a cache sync or readiness)
    optional: bool = False

    def __post_init__(self) -> None:
        if not self.versions:
            raise ValueError(f"{self.kind}: at least one version is required")

    @property
    def crd_name(self) -> str:
        """The name of its CustomResourceDefinition (``prometheusrules.monitoring.coreos.com``)."""
        return f"{self.plural}.{self.group}"

    @property
    def group_kind(self) -> str:
        """``PrometheusRule.monitoring.coreos.com`` (``kubectl`` style)."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def resource(self, version: str | None = None) -> Resource:
        """The REST resource at ``version`` (default: the most preferred version we speak)."""
        return _resource(self, version or self.versions[0])

    @classmethod
    def of(cls, resource: Resource, *, optional: bool = False) -> Kind:
        """The kind of a statically known resource (built-in kinds)."""
        return cls(
            resource.group,
            resource.kind,
            resource.plural,
            (resource.version,),
            resource.namespaced,
            optional,
        )


@functools.cache
def _resource(kind: Kind, version: str) -> Resource:
    # a reconcile resolves every child kind; one Resource per (kind, version), not one per call
    return Resource(kind.group, version, kind.plural, kind.kind, kind.namespaced)


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key: smaller sorts first (preferred). ``v2 < v1 < v1beta2 < v1beta1 < v1alpha1 < foo``."""
    m = _KUBE_VERSION.match(version)
    if m is None:
        return (3, 0, 0, version)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor, "")


def served_version(kind: Kind, crd: dict[str, Any] | None) -> str | None:
    """The version to use for ``kind`` given its CRD object, or None when none we speak is served."""
    if crd is None or not apiextensions.established(crd):
        return None
    served = [v.get("name", "") for v in (crd.get("spec") or {}).get("versions") or () if v.get("served")]
    usable = sorted((v for v in served if v in kind.versions), key=version_priority)
    return usable[0] if usable else None


def slim_crd(crd: dict[str, Any]) -> dict[str, Any]:
    """An informer transform: keep what version resolution reads, drop the (large) schemas."""
    meta = objects.meta(crd)
    spec = crd.get("spec") or {}
    return {
        "apiVersion": crd.get("apiVersion"),
        "kind": crd.get("kind"),
        "metadata": {
            k: meta[k] for k in ("name", "uid", "resourceVersion", "deletionTimestamp") if k in meta
        },
        "spec": {
            "group": spec.get("group"),
            "names": spec.get("names"),
            "scope": spec.get("scope"),
            "versions": [
                {"name": v.get("name"), "served": v.get("served"), "storage": v.get("storage")}
                for v in spec.get("versions") or ()
            ],
        },
        "status": {"conditions": (crd.get("status") or {}).get("conditions") or []},
    }
