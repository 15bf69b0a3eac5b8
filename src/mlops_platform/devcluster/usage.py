"""Simulated CPU and memory usage of the local cluster's pods (kwok's resource-usage emulation).

Nothing runs in the fake pods, so their usage is made up: kwok serves each fake node's kubelet
``/metrics/resource`` from the Metric ``metrics-resource`` (upstream's, from the pinned kwok module),
whose values come from ClusterResourceUsage objects; metrics-server scrapes it, and ``kubectl top``
and the HorizontalPodAutoscaler see those numbers.

kwok uses, for a pod, the first ClusterResourceUsage whose selector (namespaces, pod names) matches,
in no fixed order (its informer's map), so two objects covering the same pod would be a coin toss.
The cluster therefore has exactly one, :data:`NAME`, and loads are rows of a table (its annotation
:data:`LOADS_ANNOTATION`, JSON) from which its CEL expressions are generated. For each container:

1. the pod annotation ``kwok.x-k8s.io/usage-cpu`` / ``kwok.x-k8s.io/usage-memory`` (upstream's
   convention), when set;
2. else the first :class:`Load` whose namespace and labels match the pod: a fraction of the
   container's request (``cpu=0.9``: 90 % of its CPU request), so pods an HPA adds get it too;
3. else 1m CPU and 1Mi memory (upstream's default; metrics-server drops samples of zero).

:func:`set_load` and :func:`clear_load` rewrite the table with optimistic concurrency (a PUT with the
read resourceVersion, retried on conflict), so concurrent writers never lose each other's rows.
(A namespaced ResourceUsage named after a pod still overrides all this, as in kwok.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Literal

import yaml

from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.devcluster import gomod
from mlops_platform.runtime import objects, wait
from mlops_platform.runtime.transport import client as rclient

NAME = "mlops-simulated-usage"
LOADS_ANNOTATION = "mlops.platform/simulated-loads"
FIELD_MANAGER = "mlops-platform-dev"
KWOK_API_VERSION = "kwok.x-k8s.io/v1alpha1"
CLUSTER_RESOURCE_USAGE = rclient.Resource(
    "kwok.x-k8s.io", "v1alpha1", "clusterresourceusages", "ClusterResourceUsage", namespaced=False
)
METRIC = rclient.Resource("kwok.x-k8s.io", "v1alpha1", "metrics", "Metric", namespaced=False)
API_SERVICE = rclient.Resource("apiregistration.k8s.io", "v1", "apiservices", "APIService", namespaced=False)
METRICS_API_SERVICE = "v1beta1.metrics.k8s.io"
# upstream's Metric emulating the kubelet's /metrics/resource (what metrics-server scrapes)
_METRIC_FILE = "kustomize/metrics/resource/metrics-resource.yaml"
_ANNOTATION = {"cpu": "kwok.x-k8s.io/usage-cpu", "memory": "kwok.x-k8s.io/usage-memory"}
_IDLE = {"cpu": "1m", "memory": "1Mi"}
Resource = Literal["cpu", "memory"]
_MAX_CONFLICTS = 20


@dataclasses.dataclass(frozen=True)
class Load:
    """Pods of ``namespace`` carrying every label of ``selector`` use ``cpu`` (``memory``) times their
    container's request; ``None`` leaves that resource idle."""

    namespace: str
    selector: tuple[tuple[str, str], ...]
    cpu: float | None = None
    memory: float | None = None

    def __post_init__(self) -> None:
        for what, fraction in (("cpu", self.cpu), ("memory", self.memory)):
            if fraction is not None and not 0 <= fraction <= 100:
                raise ValueError(f"{what}: {fraction} is not a fraction of the request in [0, 100]")
        if not self.selector:
            raise ValueError("a load selects pods by at least one label")

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        return (self.namespace, self.selector)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"namespace": self.namespace, "selector": dict(self.selector)}
        out |= {k: v for k, v in (("cpu", self.cpu), ("memory", self.memory)) if v is not None}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Load:
        return make(data["namespace"], data["selector"], cpu=data.get("cpu"), memory=data.get("memory"))


def make(
    namespace: str, selector: Mapping[str, str], *, cpu: float | None = None, memory: float | None = None
) -> Load:
    """A :class:`Load` (the selector in a canonical order)."""
    return Load(namespace, tuple(sorted(selector.items())), cpu=cpu, memory=memory)


def for_inferenceservice(
    namespace: str, name: str, *, cpu: float | None = None, memory: float | None = None
) -> Load:
    """The load of every pod of the InferenceService ``namespace/name`` (all its components)."""
    return make(namespace, {labels.INFERENCESERVICE: name}, cpu=cpu, memory=memory)


def _string(value: str) -> str:
    return json.dumps(value)  # a JSON string literal is a CEL string literal


def _matches(load: Load) -> str:
    terms = [f"pod.metadata.namespace == {_string(load.namespace)}"]
    for key, value in load.selector:
        k = _string(key)
        terms.append(f"{k} in pod.metadata.labels && pod.metadata.labels[{k}] == {_string(value)}")
    return " && ".join(terms)


def expression(resource: Resource, loads: Iterable[Load]) -> str:
    """The CEL expression of one container's ``resource`` usage for the table ``loads`` (in order)."""
    annotation = _string(_ANNOTATION[resource])
    request = f"container.resources.requests[{_string(resource)}]"
    lines = [
        f"{annotation} in pod.metadata.annotations",
        f"? Quantity(pod.metadata.annotations[{annotation}])",
    ]
    for load in loads:
        fraction = load.cpu if resource == "cpu" else load.memory
        if fraction is None:
            continue
        lines.append(f": {_matches(load)} && {_string(resource)} in container.resources.requests")
        lines.append(f"? {request} * {float(fraction)!r}")
    lines.append(f": Quantity({_string(_IDLE[resource])})")
    return "\n".join(lines) + "\n"


def manifest(loads: Iterable[Load]) -> dict[str, Any]:
    """The ClusterResourceUsage :data:`NAME` for the table ``loads``."""
    table = list(loads)
    return {
        "apiVersion": KWOK_API_VERSION,
        "kind": "ClusterResourceUsage",
        "metadata": {
            "name": NAME,
            "annotations": {LOADS_ANNOTATION: json.dumps([load.to_json() for load in table])},
        },
        "spec": {
            "usages": [
                {"usage": {r: {"expression": expression(r, table)} for r in ("cpu", "memory")}},
            ]
        },
    }


def loads_of(obj: Mapping[str, Any] | None) -> list[Load]:
    """The table kept in a live :data:`NAME` object (empty when there is none)."""
    raw = objects.annotations(obj).get(LOADS_ANNOTATION) if obj else None
    return [Load.from_json(row) for row in json.loads(raw)] if raw else []


def metric_manifests() -> list[dict[str, Any]]:
    """kwok's upstream Metric objects emulating the kubelet's ``/metrics/resource``."""
    path = gomod.module_dir("kwok", "sigs.k8s.io/kwok") / _METRIC_FILE
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


async def _get(c: rclient.Client) -> dict[str, Any] | None:
    try:
        return await c.get(CLUSTER_RESOURCE_USAGE, NAME)
    except rclient.ApiError as e:
        if e.not_found:
            return None
        raise


async def install(c: rclient.Client) -> None:
    """Apply the upstream Metric and the usage object (keeping the loads of a live one)."""
    for metric in metric_manifests():
        await c.apply(METRIC, metric, field_manager=FIELD_MANAGER)
    await _update(c, lambda table: table)


async def _update(c: rclient.Client, change: Callable[[list[Load]], list[Load]]) -> list[Load]:
    for _ in range(_MAX_CONFLICTS):
        live = await _get(c)
        table = change(loads_of(live))
        desired = manifest(table)
        try:
            if live is None:
                await c.create(CLUSTER_RESOURCE_USAGE, desired)
            else:
                desired["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
                await c.replace(CLUSTER_RESOURCE_USAGE, desired)
        except rclient.ApiError as e:
            if e.conflict:  # another writer came first (or created it): read again
                continue
            raise
        return table
    raise RuntimeError(f"ClusterResourceUsage {NAME}: {_MAX_CONFLICTS} conflicting writes in a row")


async def set_load(c: rclient.Client, load: Load) -> list[Load]:
    """Add ``load`` to the table (replacing a row for the same namespace and selector); return it."""
    return await _update(c, lambda table: [*(r for r in table if r.key != load.key), load])


async def clear_load(c: rclient.Client, load: Load) -> list[Load]:
    """Remove the row for ``load``'s namespace and selector (the pods go back to idle); return the table."""
    return await _update(c, lambda table: [r for r in table if r.key != load.key])


async def current_loads(c: rclient.Client) -> list[Load]:
    return loads_of(await _get(c))


@contextlib.asynccontextmanager
async def loaded(c: rclient.Client, load: Load) -> AsyncIterator[Load]:
    """``load`` while the block runs, cleared after it (whatever happens)."""
    await set_load(c, load)
    try:
        yield load
    finally:
        await clear_load(c, load)


async def metrics_api_registered(c: rclient.Client) -> bool:
    """Whether the cluster registers the resource metrics API (kwokctl ran metrics-server)."""
    try:
        await c.get(API_SERVICE, METRICS_API_SERVICE)
    except rclient.ApiError as e:
        if e.not_found:
            return False
        raise
    return True


async def wait_metrics_api(c: rclient.Client, *, timeout: float) -> dict[str, Any]:
    """Wait until the aggregator reports the metrics APIService Available (metrics-server answers)."""

    async def available() -> dict[str, Any] | None:
        svc = await c.get(API_SERVICE, METRICS_API_SERVICE)
        return svc if objects.condition_is(svc, "Available") else None

    return await wait.until(available, timeout=timeout, interval=0.5, what="metrics API Available")
