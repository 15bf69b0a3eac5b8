"""What the InferenceService reconciler reads of pods and of the canary's EndpointSlices.

Both are cached slim (:func:`slim_pod`, :func:`slim_slice`: decoded only in the parts
:data:`POD_SHAPE` and :data:`SLICE_SHAPE` name, then cut to what is read here), indexed by their
InferenceService (:data:`POD_INDEX`), and enqueue a reconcile only when what the reconciler reads
of them changes (:func:`pod_signal`, :func:`ready_endpoints`).
"""

from __future__ import annotations

from collections.abc import Sequence

from mlops_platform.controllers.inferenceservice import labels, pod_problems, traffic
from mlops_platform.controllers.inferenceservice.children import model_mount
from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import transforms
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import shape as rshape

#: pods and canary EndpointSlices by ``namespace/<InferenceService name>`` (:func:`pod_index`)
POD_INDEX = "inferenceservice"


def pod_failure(pod: Obj) -> tuple[str, str] | None:
    """What the reconciler reads of a stable pod: its first failing container, else why it cannot
    be scheduled (see pod_problems.pod_problem)."""
    return pod_problems.pod_problem((pod,))


def failures(pods: Sequence[Obj]) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """The failure of the stable component's pods and of the canary's (see pod_problems.pod_problem)."""
    stable = pod_problems.pod_problem(p for p in pods if _component(p) != labels.CANARY)
    canary = pod_problems.pod_problem(p for p in pods if _component(p) == labels.CANARY)
    return stable, canary


def pod_signal(pod: Obj) -> object:
    """All the reconciler reads of one pod (the watch enqueues when it changes): its failure, and
    for a canary pod also its readiness and model (the candidate's entry into the route)."""
    failure = pod_failure(pod)
    if _component(pod) != labels.CANARY:
        return failure
    return failure, traffic.pod_ready(pod), traffic.pod_model(pod)


#: what :func:`slim_pod` reads of a pod: its node (spec.nodeName) and status; the rest of its spec
#: (most of its bytes) is skipped when decoded
POD_SHAPE = rshape.shape({"spec": {"nodeName": None}, "status": None})
#: what :func:`slim_slice` reads of an EndpointSlice
SLICE_SHAPE = rshape.shape({"endpoints": None})


def slim_pod(pod: Obj) -> Obj:
    """The cache transform of pods: what :func:`pod_index` and :func:`pod_failure` read, and no more
    (a pod's spec is most of its bytes; at thousands of pods it would be most of the cache)."""
    meta = pod.get("metadata") or {}
    st = pod.get("status") or {}
    statuses = []
    for cs in st.get("containerStatuses") or ():
        state = cs.get("state") or {}
        waiting = state.get("waiting")
        slim_state: Obj = {"waiting": waiting} if waiting else {"running": {}} if "running" in state else {}
        slim_cs: Obj = {"name": cs.get("name"), "state": slim_state}
        for flag in ("started", "ready"):  # a started container that is not ready: readiness fails
            if flag in cs:
                slim_cs[flag] = cs[flag]
        terminated = (cs.get("lastState") or {}).get("terminated")
        if waiting and terminated:  # why it is waiting again (OOMKilled, Error, the server's words)
            slim_cs["lastState"] = {"terminated": _slim_terminated(terminated)}
        statuses.append(slim_cs)
    slim_status: Obj = {"containerStatuses": statuses}
    initializer = _slim_initializer(st)
    if initializer is not None:
        slim_status["initContainerStatuses"] = [initializer]
    placed = pod_problems.unscheduled(pod) is None  # a bound pod's stale PodScheduled=False is not kept
    kept_conditions = [  # unscheduled, and readiness (a canary's entry into the route)
        {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
        for c in st.get("conditions") or ()
        if (c.get("type") == "PodScheduled" and c.get("status") == "False" and not placed)
        or c.get("type") == "Ready"
    ]
    kept = ("name", "namespace", "uid", "resourceVersion", "labels", "deletionTimestamp")
    slim_meta = {k: meta[k] for k in kept if k in meta}
    model = (meta.get("annotations") or {}).get(labels.MODEL_URI_ANNOTATION)
    if model:
        slim_meta["annotations"] = {labels.MODEL_URI_ANNOTATION: model}
    if kept_conditions:
        slim_status["conditions"] = kept_conditions
    slim: Obj = {"metadata": slim_meta, "status": slim_status}
    node = (pod.get("spec") or {}).get("nodeName")
    if node:  # the node a NodeNotReady message names
        slim["spec"] = {"nodeName": node}
    return transforms.intern_strings(slim)  # type: ignore[no-any-return]


def _slim_initializer(st: Obj) -> Obj | None:
    """What :func:`pod_problems.pod_problem` reads of the storage initializer's status: the waiting
    reason, and of its current or last termination the exit code, reason and message (bounded:
    the kubelet allows 4 KiB, the status keeps less)."""
    for cs in st.get("initContainerStatuses") or ():
        if cs.get("name") != model_mount.STORAGE_INITIALIZER:
            continue
        state = cs.get("state") or {}
        slim_state: Obj = {}
        if state.get("waiting"):
            slim_state["waiting"] = {
                k: state["waiting"][k] for k in ("reason", "message") if k in state["waiting"]
            }
        elif state.get("terminated"):
            slim_state["terminated"] = _slim_terminated(state["terminated"])
        elif "running" in state:
            slim_state["running"] = {}
        slim_cs: Obj = {"name": cs["name"], "state": slim_state}
        last = (cs.get("lastState") or {}).get("terminated")
        if last:
            slim_cs["lastState"] = {"terminated": _slim_terminated(last)}
        return slim_cs
    return None


def _slim_terminated(terminated: Obj) -> Obj:
    out: Obj = {k: terminated[k] for k in ("exitCode", "reason") if k in terminated}
    if terminated.get("message"):
        out["message"] = pod_problems.bounded(str(terminated["message"]))
    return out


def pod_index(pod: Obj) -> list[str]:
    """Index pods (and canary EndpointSlices) by ``namespace/<InferenceService name>`` (from the
    label every component carries; the EndpointSlice controller copies a Service's labels)."""
    name = objects.labels(pod).get(labels.INFERENCESERVICE)
    return [f"{objects.namespace(pod)}/{name}"] if name else []


#: the canary Service's EndpointSlices: only they are watched (label-selected by the API server)
CANARY_SLICES = f"{labels.MANAGED_BY_SELECTOR},{labels.COMPONENT}={labels.CANARY}"


def ready_endpoints(endpoint_slice: Obj) -> int:
    """Ready endpoints of one EndpointSlice (``conditions.ready`` unset counts as ready, as the API
    says); all the reconciler reads of it."""
    if "readyEndpoints" in endpoint_slice:  # slimmed by the cache transform
        return int(endpoint_slice["readyEndpoints"])
    return sum(
        1 for e in endpoint_slice.get("endpoints") or () if (e.get("conditions") or {}).get("ready", True)
    )


def slim_slice(endpoint_slice: Obj) -> Obj:
    """The cache transform of EndpointSlices: identity, labels and the ready count."""
    meta = endpoint_slice.get("metadata") or {}
    kept = ("name", "namespace", "uid", "resourceVersion", "labels")
    slim = {
        "metadata": {k: meta[k] for k in kept if k in meta},
        "readyEndpoints": ready_endpoints(endpoint_slice),
    }
    return transforms.intern_strings(slim)  # type: ignore[no-any-return]


def _component(pod: Obj) -> str | None:
    return objects.labels(pod).get(labels.COMPONENT)
