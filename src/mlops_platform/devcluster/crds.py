"""Third-party CRDs, installed from the YAML files their upstream Go modules ship (pinned in hack/crds)."""

from __future__ import annotations

from typing import Any

from mlops_platform.devcluster import gomod
from mlops_platform.runtime import objects
from mlops_platform.runtime.transport import apiextensions
from mlops_platform.runtime.transport import client as rclient

FIELD_MANAGER = "mlops-platform-dev"

# (module, file in the module, CRD names to take from it)
SOURCES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "istio.io/api",
        "kubernetes/customresourcedefinitions.gen.yaml",
        ("virtualservices.networking.istio.io", "destinationrules.networking.istio.io"),
    ),
    (
        "github.com/prometheus-operator/prometheus-operator",
        "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
        ("prometheusrules.monitoring.coreos.com",),
    ),
    (
        "github.com/prometheus-operator/prometheus-operator",
        "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
        ("servicemonitors.monitoring.coreos.com",),
    ),
    *(
        (
            "sigs.k8s.io/gateway-api",
            f"config/crd/standard/gateway.networking.k8s.io_{plural}.yaml",
            (f"{plural}.gateway.networking.k8s.io",),
        )
        for plural in ("gatewayclasses", "gateways", "httproutes", "referencegrants")
    ),
    # cert-manager's Issuer and Certificate: the webhook-certificate install (config/cert-manager,
    # docs/install-cert-manager.md) applies as written; no cert-manager runs (its binaries are not
    # modules the proxy serves), so nothing issues them
    *(
        (
            "github.com/cert-manager/cert-manager",
            f"deploy/crds/cert-manager.io_{plural}.yaml",
            (f"{plural}.cert-manager.io",),
        )
        for plural in ("issuers", "certificates")
    ),
    *(
        ("github.com/kedacore/keda/v2", f"config/crd/bases/keda.sh_{plural}.yaml", (f"{plural}.keda.sh",))
        for plural in ("scaledobjects", "triggerauthentications", "clustertriggerauthentications")
    ),
)


def manifests() -> list[dict[str, Any]]:
    """The CRD objects, in SOURCES order."""
    out: list[dict[str, Any]] = []
    for module, rel, names in SOURCES:
        docs = gomod.documents("crds", module, rel)
        by_name = {objects.name(d): d for d in docs if d.get("kind") == "CustomResourceDefinition"}
        for name in names:
            if name not in by_name:
                raise LookupError(f"{module}/{rel} has no CRD {name}")
            out.append(by_name[name])
    return out


def names() -> list[str]:
    return [n for _, _, ns in SOURCES for n in ns]


async def install(c: rclient.Client, *, timeout: float = 60.0) -> None:
    """Server-side apply every CRD and wait until each is Established."""
    await apiextensions.install(c, manifests(), field_manager=FIELD_MANAGER, timeout=timeout)
