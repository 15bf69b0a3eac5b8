"""Why an InferenceService's pods do not run or serve, read from the pods alone (pure): the first
failing container (:data:`POD_FAILURE_REASONS`), a failed model download (the storage
initializer's termination message, :data:`MODEL_DOWNLOAD_FAILED`), a pod the scheduler has not
placed, one whose readiness probe fails or one on a node that stopped reporting
(:data:`POD_PENDING_REASONS`: these gate Ready only while nothing serves). Every upstream message
is :func:`bounded`, so the status stays small. Read by the status
(:mod:`~mlops_platform.controllers.inferenceservice.status`) and by ``why``.
"""

from __future__ import annotations

from collections.abc import Iterable

from mlops_platform.controllers.inferenceservice.children import model_mount
from mlops_platform.runtime import objects
from mlops_platform.runtime.objects import Obj

POD_FAILURE_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "InvalidImageName",
        "RunContainerError",
    }
)
#: the reasons the scheduler gives a pod's ``PodScheduled=False`` condition (kube-scheduler)
SCHEDULING_REASONS = frozenset({"Unschedulable", "SchedulingGated", "SchedulerError"})
#: pod causes that hold the pod back from running at all; they gate Ready only while no replica is
#: ready (a scale-up beyond the cluster's capacity leaves a serving service serving)
POD_PENDING_REASONS = SCHEDULING_REASONS | {"ReadinessProbeFailing", "NodeNotReady"}
#: an upstream message is cut to this many characters on the status (the status stays small)
MAX_UPSTREAM_MESSAGE = 512


def bounded(message: str, limit: int = MAX_UPSTREAM_MESSAGE) -> str:
    """``message`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    return message if len(message) <= limit else message[: limit - 1] + "…"


def pod_problem(pods: Iterable[Obj]) -> tuple[str, str] | None:
    """The first cause among the InferenceService's pods that a pod cannot run or serve:
    (reason, message). A failing container (``CrashLoopBackOff`` with its last exit reason, e.g.
    ``OOMKilled``; image pull errors; ...) first, else a pod the scheduler cannot place
    (``Unschedulable``, with the scheduler's message: ``0/5 nodes are available: 5 Insufficient
    nvidia.com/gpu``) or a started container whose readiness probe fails
    (``ReadinessProbeFailing``); those two gate Ready only while nothing serves. A storage
    initializer that failed comes first of all: ``ModelDownloadFailed`` (:func:`model_download_failure`)."""
    pending: tuple[str, str] | None = None
    for pod in pods:
        st = pod.get("status") or {}
        fetch = model_download_failure(pod)
        if fetch is not None:
            return fetch
        for cs in st.get("containerStatuses") or ():
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in POD_FAILURE_REASONS:
                msg = f"pod {objects.name(pod)} container {cs.get('name')}: {waiting['reason']}"
                if waiting.get("message"):
                    msg += f": {waiting['message']}"
                last = ((cs.get("lastState") or {}).get("terminated")) or {}
                if last.get("reason") or last.get("exitCode") is not None:
                    msg += f" (last exit: {last.get('reason') or 'Error'}, code {last.get('exitCode')})"
                said = last_line(str(last.get("message") or ""))
                if said:  # the server's own words: its termination message, or its log's last line
                    msg += f": {said}"
                elif last.get("exitCode") == 0:  # nothing for the kubelet to keep: say where to look
                    msg += ": it stopped by itself (e.g. a model it could not load); its log says why"
                return str(waiting["reason"]), bounded(msg)
        if pending is None and (node := node_not_ready(pod)) is not None:
            pending = "NodeNotReady", node
        if pending is None:
            for cs in st.get("containerStatuses") or ():
                running = "running" in (cs.get("state") or {})
                if running and cs.get("started") is True and cs.get("ready") is False:
                    msg = (
                        f"pod {objects.name(pod)} container {cs.get('name')} is running but not ready: "
                        "its readiness probe fails"
                    )
                    pending = "ReadinessProbeFailing", msg
                    break
        if pending is None and (unplaced := unscheduled(pod)) is not None:
            reason, message = unplaced
            pending = reason, bounded(f"pod {objects.name(pod)} cannot be scheduled: {message or reason}")
    return pending


def node_not_ready(pod: Obj) -> str | None:
    """The message for a pod the node controller took out of service: ``Ready=False`` while every
    container says it is ready. Only the node lifecycle controller makes that pair (it flips the
    pod's ``Ready`` alone when the node's kubelet stops reporting, and records a ``NodeNotReady``
    event); the kubelet sets both from the same probes, and this API offers no readiness gate. The
    containers may still run: no Service sends them a request meanwhile."""
    st = pod.get("status") or {}
    ready = next((c.get("status") for c in st.get("conditions") or () if c.get("type") == "Ready"), None)
    containers = st.get("containerStatuses") or ()
    if ready != "False" or not containers or objects.deleting(pod):
        return None
    if not all(cs.get("ready") is True for cs in containers):
        return None
    node = (pod.get("spec") or {}).get("nodeName") or "?"
    return (
        f"pod {objects.name(pod)}: its node {node} stopped reporting (NodeNotReady): the control plane "
        "takes it out of its Service until the node's kubelet is back"
    )


def unscheduled(pod: Obj) -> tuple[str, str] | None:
    """``(reason, message)`` of a pod the scheduler has not placed: ``PodScheduled=False`` on a pod
    without ``spec.nodeName``. A pod bound to a node is scheduled whatever that condition still
    says: when a bind's answer is lost (an API server restart), the scheduler's retry gets "already
    assigned", it records ``PodScheduled=False``/``SchedulerError`` on the bound pod, and nothing
    but a kubelet sets the condition again (kwok does not), so it may stay False on a running pod."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("reason") or "Unschedulable"), str(cond.get("message") or "")
    return None


MODEL_DOWNLOAD_FAILED = "ModelDownloadFailed"


def model_download_failure(pod: Obj) -> tuple[str, str] | None:
    """``(ModelDownloadFailed, "pod <name>: <the initializer's last line>")`` when the pod's storage
    initializer ran and failed: terminated with a non-zero exit code (``Init:Error``), waiting
    to be restarted after such a run (``Init:CrashLoopBackOff``, its last termination failed) or
    running again after it (the kubelet's retry: the failure stands until a run succeeds). The
    message is the initializer's termination message (``model download failed: ...``, its one
    line), else its exit code; the same in both states, so a restart changes nothing. The
    initializer waiting for another reason (its image cannot be pulled) is that reason."""
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or ():
        if cs.get("name") != model_mount.STORAGE_INITIALIZER:
            continue
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        terminated = state.get("terminated") or {}
        if not terminated and (waiting.get("reason") == "CrashLoopBackOff" or "running" in state):
            # waiting to retry, or retrying: the last run's failure stands until a run succeeds
            terminated = (cs.get("lastState") or {}).get("terminated") or {}
        code = terminated.get("exitCode")
        if code not in (None, 0):
            message = str(terminated.get("message") or "")
            reason = str(terminated.get("reason") or "")
            return MODEL_DOWNLOAD_FAILED, download_failure(objects.name(pod), message, int(code), reason)
        if waiting.get("reason") in POD_FAILURE_REASONS:
            msg = f"pod {objects.name(pod)} init container {cs.get('name')}: {waiting['reason']}"
            if waiting.get("message"):
                msg += f": {waiting['message']}"
            return str(waiting["reason"]), bounded(msg)
    return None


def last_line(message: str) -> str:
    """The last non-blank line of a termination message (a server's error ends its log)."""
    return next((line.strip() for line in reversed(message.splitlines()) if line.strip()), "")


def download_failure(pod: str, message: str, exit_code: int, reason: str = "") -> str:
    """``pod <name>: <the last line of the initializer's termination message>`` (bounded), else its
    exit code (``why`` says the same from the pods it reads)."""
    why = last_line(message) or f"the storage initializer exited with code {exit_code} ({reason or 'Error'})"
    return bounded(f"pod {pod}: {why}")
