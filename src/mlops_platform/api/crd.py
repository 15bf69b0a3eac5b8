"""The InferenceService CustomResourceDefinition, generated from the Python types.

Contract:
- :func:`structural_schema` turns ``msgspec.json.schema(root)`` into a Kubernetes *structural*
  OpenAPI v3 schema: ``$ref`` inlined, ``Optional[X]`` becomes ``X`` (not required), ``str | int``
  becomes ``x-kubernetes-int-or-string``, ``dict[str, Any]`` preserves unknown fields (except the
  root ``metadata``), ``title`` and ``additionalProperties: false`` dropped (the server prunes, or
  rejects with ``fieldValidation=Strict``, unknown fields), ``description``,
  ``default`` (except null), ``enum``, bounds, ``pattern``, lengths, ``required`` and every
  ``x-kubernetes-*`` extension (CEL rules, list types) kept. An unsupported keyword or union raises
  :class:`TypeError` instead of producing a schema the API server would reject.
- :func:`crd_manifest` builds the CRD from :data:`VERSIONS` (one :class:`Version` per API version:
  add v1beta1 by appending its root type); :func:`render` is its deterministic YAML.
- ``python -m mlops_platform.api.crd`` prints the YAML; ``--write`` writes :data:`CRD_FILE`;
  ``--check`` exits 1 with a unified diff when the committed file differs
  (:mod:`mlops_platform.runtime.generated`).
- :func:`install` server-side applies the CRD and waits until it is Established.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import msgspec

from mlops_platform.api import CRD_NAME, RESOURCE, v1, v1alpha1, v1beta1
from mlops_platform.runtime import generated
from mlops_platform.runtime.transport import apiextensions
from mlops_platform.runtime.transport import client as rclient

__all__ = ["CRD_NAME", "RESOURCE", "Version", "crd_manifest", "install", "render", "structural_schema"]

JSON = dict[str, Any]
#: the committed, generated CRD (relative to the source checkout)
CRD_FILE = Path("config/crd/bases") / f"{v1alpha1.GROUP}_{v1alpha1.PLURAL}.yaml"

_READY = '.status.conditions[?(@.type=="Ready")]'
ALPHA_COLUMNS: list[JSON] = [{"name": "Framework", "type": "string", "jsonPath": ".spec.framework"}]
PREDICTOR_COLUMNS: list[JSON] = [{"name": "Runtime", "type": "string", "jsonPath": ".spec.predictor.runtime"}]
PRINTER_COLUMNS: list[JSON] = [
    {"name": "URL", "type": "string", "jsonPath": ".status.url"},
    {"name": "Ready", "type": "string", "jsonPath": f"{_READY}.status", "description": "Ready condition"},
    {"name": "Reason", "type": "string", "jsonPath": f"{_READY}.reason", "description": "why (not) Ready"},
    {
        "name": "Replicas",
        "type": "string",
        "jsonPath": ".status.replicasSummary",
        "description": "ready/desired",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def subresources(spec_replicas_path: str) -> JSON:
    """status and scale (``kubectl scale`` sets the minimum replicas at ``spec_replicas_path``)."""
    return {
        "status": {},
        "scale": {
            "specReplicasPath": spec_replicas_path,
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }


_ROOT_FIELDS: JSON = {
    "apiVersion": {
        "type": "string",
        "description": "APIVersion defines the versioned schema of this representation of an object.",
    },
    "kind": {"type": "string", "description": "Kind is a string value representing the REST resource."},
    "metadata": {"type": "object"},
}
_KEPT = frozenset(
    {
        "type", "description", "default", "enum", "format", "properties", "additionalProperties",
        "items", "required",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
        "pattern", "minLength", "maxLength", "minItems", "maxItems", "uniqueItems",
        "minProperties", "maxProperties",
    }
)  # fmt: skip
_ENUM_TYPES = {str: "string", int: "integer", bool: "boolean"}


@dataclasses.dataclass(frozen=True)
class Version:
    """One API version of the CRD: its name and the root Struct its schema is generated from."""

    name: str
    root: type[msgspec.Struct]
    served: bool = True
    storage: bool = False
    deprecation_warning: str | None = None
    spec_replicas_path: str = ".spec.predictor.autoscaling.minReplicas"
    columns: tuple[JSON, ...] = tuple(PREDICTOR_COLUMNS)


VERSIONS: tuple[Version, ...] = (
    Version(
        v1alpha1.VERSION,
        v1alpha1.InferenceService,
        deprecation_warning="mlops.platform/v1alpha1 InferenceService is deprecated; use mlops.platform/v1 "
        "(docs/api-versions.md)",
        spec_replicas_path=".spec.minReplicas",
        columns=tuple(ALPHA_COLUMNS),
    ),
    Version(v1beta1.VERSION, v1beta1.InferenceService),
    Version(v1.VERSION, v1.InferenceService, storage=True),
)
#: the conversion webhook's path on the operator's webhook server
WEBHOOK_PATH = "/convert"
#: the in-cluster webhook Service (``config/webhook/``): namespace, name, port
WEBHOOK_SERVICE = ("mlops-system", "mlops-platform-webhook", 443)


def conversion(*, url: str | None = None, service: tuple[str, str, int] = WEBHOOK_SERVICE) -> JSON:
    """``spec.conversion``: the operator's webhook, at ``url`` (the local control plane) or behind the
    in-cluster ``service``. The operator injects ``caBundle`` itself (docs/webhook-tls.md)."""
    if url is not None:
        client_config: JSON = {"url": url}
    else:
        namespace, name, port = service
        client_config = {
            "service": {"namespace": namespace, "name": name, "path": WEBHOOK_PATH, "port": port}
        }
    return {
        "strategy": "Webhook",
        "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": client_config},
    }


def structural_schema(root: type[msgspec.Struct]) -> JSON:
    """The structural OpenAPI v3 schema of a whole object whose type is ``root``."""
    raw = msgspec.json.schema(root)
    defs = raw.pop("$defs", {})
    schema = _convert(raw, defs, "")
    schema["properties"] = {**schema.get("properties", {}), **_ROOT_FIELDS}
    required = [r for r in schema.get("required", []) if r not in _ROOT_FIELDS]
    schema.pop("required", None)
    if required:
        schema["required"] = required
    return schema


def _convert(node: JSON, defs: dict[str, JSON], path: str) -> JSON:
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is not None:
        node = {**_convert(defs[ref.rsplit("/", 1)[-1]], defs, path), **node}
    branches = node.pop("anyOf", None)
    if branches is not None:
        node = {**_union([b for b in branches if b != {"type": "null"}], defs, path), **node}
    node.pop("title", None)
    if node.get("default", 0) in (None, ""):  # "unset" in Python (omit_defaults), not a value
        del node["default"]
    if isinstance(node.get("default"), tuple):  # an immutable list's default is a list
        node["default"] = list(node["default"])
    values = node.pop("additionalProperties", False)
    if isinstance(values, dict):  # dict[str, X]
        node["additionalProperties"] = _convert(values, defs, f"{path}.*")
    elif node.get("type") == "object" and "properties" not in node and path != ".metadata":
        node["x-kubernetes-preserve-unknown-fields"] = True  # dict[str, Any]: the server must not prune it
    if "enum" in node and "type" not in node:
        kinds = {_ENUM_TYPES.get(type(v)) for v in node["enum"]}
        if len(kinds) != 1 or None in kinds:
            raise TypeError(f"{path}: enum of mixed or unsupported types {node['enum']!r}")
        node["type"] = kinds.pop()
    if "properties" in node:
        node["properties"] = {k: _convert(v, defs, f"{path}.{k}") for k, v in node["properties"].items()}
    if isinstance(node.get("items"), dict):
        node["items"] = _convert(node["items"], defs, f"{path}[]")
    elif "items" in node:
        raise TypeError(f"{path}: tuples (prefixItems) have no CRD equivalent")
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), (int, float)) and not isinstance(node[bound], bool):
            # JSON Schema 2020 (msgspec) says exclusiveMinimum: x; OpenAPI v3.0 minimum: x + true
            node[plain], node[bound] = node[bound], True
    if node.get("required") == []:
        del node["required"]
    unknown = {k for k in node if k not in _KEPT and not k.startswith("x-kubernetes-")}
    if unknown:
        raise TypeError(f"{path or '<root>'}: JSON schema keywords {sorted(unknown)} have no CRD equivalent")
    return node


def _union(branches: list[JSON], defs: dict[str, JSON], path: str) -> JSON:
    if len(branches) == 1:
        return _convert(branches[0], defs, path)
    if sorted(b.get("type", "") for b in branches) == ["integer", "string"]:
        merged: JSON = {"x-kubernetes-int-or-string": True}
        for b in branches:
            merged.update({k: v for k, v in _convert(b, defs, path).items() if k != "type"})
        return merged
    raise TypeError(f"{path}: union {branches!r} is not structural (only X | None and int | str are)")


def _with_root_rules(schema: JSON, root: type[msgspec.Struct]) -> JSON:
    """Add the version module's ``ROOT_RULES`` (CEL on the whole object, e.g. metadata.name)."""
    rules = getattr(sys.modules[root.__module__], "ROOT_RULES", None)
    if rules:
        schema["x-kubernetes-validations"] = list(rules)
    return schema


def version_entry(version: Version) -> JSON:
    """The ``spec.versions[]`` item of ``version``."""
    entry: JSON = {
        "name": version.name,
        "served": version.served,
        "storage": version.storage,
        "schema": {"openAPIV3Schema": _with_root_rules(structural_schema(version.root), version.root)},
        "subresources": subresources(version.spec_replicas_path),
        "additionalPrinterColumns": [*version.columns, *PRINTER_COLUMNS],
    }
    if version.deprecation_warning is not None:
        entry.update(deprecated=True, deprecationWarning=version.deprecation_warning)
    return entry


def crd_manifest(versions: tuple[Version, ...] = VERSIONS, *, webhook_url: str | None = None) -> JSON:
    """The apiextensions.k8s.io/v1 CustomResourceDefinition object (exactly one storage version); with
    several versions, converted by the operator's webhook (at ``webhook_url``, else its Service)."""
    if sum(v.storage for v in versions) != 1:
        raise ValueError("exactly one version must be the storage version")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "mlops-platform"}},
        "spec": {
            "group": v1alpha1.GROUP,
            "names": {
                "kind": v1alpha1.KIND,
                "listKind": f"{v1alpha1.KIND}List",
                "plural": v1alpha1.PLURAL,
                "singular": v1alpha1.SINGULAR,
                "shortNames": list(v1alpha1.SHORT_NAMES),
                "categories": list(v1alpha1.CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [version_entry(v) for v in versions],
            **({"conversion": conversion(url=webhook_url)} if len(versions) > 1 else {}),
        },
    }


_HEADER = (
    "# Generated from src/mlops_platform/api/ by `python -m mlops_platform.api.crd --write`. Do not edit.\n"
)


def render(manifest: JSON | None = None) -> str:
    """Deterministic YAML (sorted keys, no aliases, no line folding) of the CRD."""
    return _HEADER + generated.dump([manifest or crd_manifest()], sort_keys=True)


async def install(
    client: rclient.Client,
    *,
    webhook_url: str | None,
    timeout: float = 60.0,
    versions: tuple[Version, ...] = VERSIONS,
) -> JSON:
    """Server-side apply the CRD (idempotent), wait until it is Established, refresh discovery.

    ``webhook_url``: where the API server calls the conversion webhook (the local control plane);
    None: the in-cluster Service. The caBundle is the webhook's to inject, not the installer's.
    ``versions``: the versions served (:func:`crd_manifest`; one alone needs no webhook)."""
    manifest = crd_manifest(versions, webhook_url=webhook_url)
    (live,) = await apiextensions.install(
        client, [manifest], field_manager=v1alpha1.FIELD_MANAGER, timeout=timeout
    )
    return live


_PROBE = {
    "apiVersion": v1alpha1.API_VERSION,
    "kind": v1alpha1.KIND,
    "metadata": {"name": "conversion-probe"},
    "spec": {"modelUri": "s3://probe/model", "framework": "triton"},
}


async def converts(client: rclient.Client, namespace: str = "default") -> bool:
    """Whether the API server converts InferenceServices through the CRD's webhook now: a dry-run
    v1alpha1 create (stored as v1, so converted) succeeds. A caBundle in the CRD, or Established,
    does not say it: the server takes a new URL or bundle a moment later. False while the call
    fails (connection refused, an unknown certificate authority); other errors propagate."""
    path = RESOURCE.path(namespace).replace(f"/{RESOURCE.version}/", "/v1alpha1/")
    try:
        await client.request("POST", path, params={"dryRun": "All"}, body=_PROBE, resource="isvc")
    except rclient.ApiError as e:
        if e.status == 500 and "conversion webhook" in e.message:
            return False
        raise
    return True


def main(argv: list[str] | None = None) -> int:
    """CLI: print the CRD, ``--write`` it, or ``--check`` the committed file (exit 1 with a diff)."""
    parser = argparse.ArgumentParser(prog="python -m mlops_platform.api.crd", description=__doc__)
    generated.add_mode_arguments(parser, str(CRD_FILE))
    parser.add_argument("--path", type=Path, help=f"the CRD file (default: <checkout>/{CRD_FILE})")
    args = parser.parse_args(argv)
    if not (args.write or args.check):
        sys.stdout.write(render())
        return 0
    path: Path = args.path or generated.checkout_root("--path") / CRD_FILE
    return generated.run(args, Path(), {path: render()}, command=parser.prog)


if __name__ == "__main__":
    sys.exit(main())
