"""Throwaway CustomResourceDefinitions for tests against a real API server: a ``Widget`` kind in a
group of the test's own, with the versions and conversion the test needs."""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
PLURAL = "widgets"


def widget_crd(group: str, versions: list[JSON], conversion: JSON) -> JSON:
    """The CRD ``widgets.<group>`` of the namespaced kind ``Widget``, serving ``versions``."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "conversion": conversion,
            "versions": versions,
        },
    }
