"""The manifests' common ground: the served versions and their REST resources, the API server's
size limits, :class:`Invalid` (a manifest the server must refuse, and the field its answer must name),
and the valid objects every hostile one starts from (:func:`base`; :func:`valid` for objects created
for real: at most :data:`MAX_REPLICAS` replicas, mostly servable by the built-in runtimes), with the
small path helpers that edit them in place.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from mlops_platform.api import v1, v1alpha1
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import conversion, conversionload, isvc

JSON = dict[str, Any]
VERSIONS = ("v1alpha1", "v1beta1", "v1")
#: the REST resource of each version
RESOURCES: dict[str, rclient.Resource] = {
    "v1alpha1": isvc.RESOURCE,
    "v1beta1": conversionload.BETA,
    "v1": rclient.Resource(v1.GROUP, v1.VERSION, v1alpha1.PLURAL, v1.KIND),
}
#: the categories of :class:`Invalid` manifests
CATEGORIES = (
    "wrong-type",
    "out-of-range",
    "bad-quantity",
    "huge",
    "unknown-field",
    "bad-uri",
    "unicode-name",
    "unicode-label",
    "cross-field",
    "bad-string",
)
#: replicas of a :func:`valid` object (its pods run on the local cluster's kwok nodes)
MAX_REPLICAS = 2
#: the API server's limit of one request body (``--max-request-bytes`` does not change it: 3 MiB)
REQUEST_LIMIT = 3 * 1024 * 1024
#: how close to :data:`REQUEST_LIMIT` the biggest manifests get (their JSON, in bytes)
HUGE_MARGIN = 64 * 1024
#: metadata.annotations: at most 256 KiB in all (keys and values)
ANNOTATIONS_LIMIT = 256 * 1024


def version_of(obj: JSON) -> str:
    """The API version of a manifest (``v1alpha1``, ``v1beta1``, ``v1``)."""
    return str(obj["apiVersion"]).rpartition("/")[2]


@dataclasses.dataclass(frozen=True)
class Invalid:
    """A manifest the API server must refuse, naming ``field``."""

    category: str
    version: str
    field: str  # the path the answer must name, as the server writes it
    obj: JSON
    what: str  # the value or change, short (for the report)
    strict: bool = False  # an error only with fieldValidation=Strict (an unknown field)

    @property
    def size(self) -> int:
        return len(json.dumps(self.obj))

    def describe(self) -> str:
        return f"{self.version} {self.category} {self.field}: {self.what}"


def merge(into: JSON, extra: JSON) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def set_path(obj: JSON, path: Sequence[str], value: Any) -> None:
    target = obj
    for key in path[:-1]:
        if not isinstance(target.get(key), dict):
            target[key] = {}
        target = target[key]
    target[path[-1]] = value


def dotted(path: Sequence[str]) -> str:
    return ".".join(path)


def _clamp(obj: JSON) -> JSON:
    """At most :data:`MAX_REPLICAS` replicas (the minimum; the maximum only matters under load)."""
    spec = obj["spec"]
    scaling = spec if "modelUri" in spec else (spec.get("predictor") or {}).get("autoscaling")
    if isinstance(scaling, dict) and int(scaling.get("minReplicas", 1)) > MAX_REPLICAS:
        scaling["minReplicas"] = MAX_REPLICAS
    return obj


_NAME = st.from_regex(r"\A[a-z]([-a-z0-9]{0,20}[a-z0-9])?\Z")


@st.composite
def base(draw: st.DrawFn, version: str) -> JSON:
    """A valid object of ``version`` as a client sends it (no status, no server-set metadata)."""
    drawn = draw(conversion.objects(version, default=False))
    meta: JSON = {"name": draw(_NAME)}
    for key in ("labels", "annotations"):
        if drawn["metadata"].get(key):
            meta[key] = drawn["metadata"][key]
    return _clamp(
        {"apiVersion": drawn["apiVersion"], "kind": drawn["kind"], "metadata": meta, "spec": drawn["spec"]}
    )


#: the runtimes of the operator's built-in table (the generated objects name others too)
BUILTIN_RUNTIMES = ("triton", "seldon", "torchserve")


def _servable(obj: JSON) -> JSON:
    """``obj`` as the operator can serve it: a built-in runtime, no model format to mismatch it and
    no ``extensions`` (where the generated objects put invalid legacy settings)."""
    spec = obj["spec"]
    spec.pop("extensions", None)
    for part in ("predictor", "canary"):
        model = (spec.get(part) or {}).get("model")
        if isinstance(model, dict):
            model.pop("format", None)
    predictor = spec.get("predictor")
    if isinstance(predictor, dict) and predictor.get("runtime") not in BUILTIN_RUNTIMES:
        predictor["runtime"] = BUILTIN_RUNTIMES[len(obj["metadata"]["name"]) % len(BUILTIN_RUNTIMES)]
    return obj


@st.composite
def valid(draw: st.DrawFn, version: str | None = None) -> JSON:
    """A valid object of ``version`` (default: any served version); the caller names it. Most are
    servable by the operator's built-in runtimes; the others may name runtimes and formats it does
    not have, or carry invalid settings under ``extensions`` (which the schema lets through)."""
    obj = draw(base(version or draw(st.sampled_from(VERSIONS))))
    return _servable(obj) if draw(st.integers(0, 3)) else obj
