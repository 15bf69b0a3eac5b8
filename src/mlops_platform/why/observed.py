"""Pods, Events and conditions as ``why`` reports them (pure: plain API objects in, records of
:mod:`~mlops_platform.why.report` out).

- :func:`pod_report`: a pod and its containers (init containers that completed are left out: no cause of
  anything); unschedulable as the status computes it (:func:`pod_problems.unscheduled`).
- :func:`events`: the Events about the InferenceService, its children and its pods (also the
  ReplicaSets and pods of its Deployments that are gone), newest first, aged against ``now``.
- :func:`conditions`: ``status.conditions``, Ready first.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping

from mlops_platform.controllers.inferenceservice import labels, pod_problems
from mlops_platform.runtime import objects
from mlops_platform.runtime.objects import Obj
from mlops_platform.why import report


def container_report(cs: Obj, *, init: bool, logged: str = "") -> report.ContainerReport:
    """One container; ``logged``: the error its previous run logged last, where it left no
    termination message (``Snapshot.logs``)."""
    state = cs.get("state") or {}
    kind = next((k for k in ("waiting", "terminated", "running") if state.get(k) is not None), "unknown")
    now = state.get(kind) or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    exit_code = now.get("exitCode")
    last_code = last.get("exitCode")
    return report.ContainerReport(
        name=str(cs.get("name") or ""),
        init=init,
        ready=bool(cs.get("ready")),
        restarts=int(cs.get("restartCount") or 0),
        state=kind,
        reason=str(now.get("reason") or ""),
        message=str(now.get("message") or "").strip(),
        exit_code=None if exit_code is None else int(exit_code),
        last_reason=str(last.get("reason") or ""),
        last_exit_code=None if last_code is None else int(last_code),
        last_message=str(last.get("message") or "").strip() or (f"its log: {logged}" if logged else ""),
    )


def pod_report(pod: Obj, logs: Mapping[tuple[str, str], str] | None = None) -> report.PodReport:
    st = pod.get("status") or {}
    logged = {c: line for (p, c), line in (logs or {}).items() if p == objects.name(pod)}
    unscheduled = pod_problems.unscheduled(pod)
    inits = [container_report(cs, init=True) for cs in st.get("initContainerStatuses") or ()]
    # an init container that completed is no cause of anything
    inits = [c for c in inits if not (c.state == "terminated" and c.exit_code == 0)]
    mains = [
        container_report(cs, init=False, logged=logged.get(str(cs.get("name")), ""))
        for cs in st.get("containerStatuses") or ()
    ]
    return report.PodReport(
        name=objects.name(pod),
        component=objects.labels(pod).get(labels.COMPONENT, ""),
        phase=str(st.get("phase") or "Unknown"),
        ready=objects.condition_is(pod, "Ready"),
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        unscheduled=unscheduled,
        containers=(*inits, *mains),
        reason=str(st.get("reason") or ""),
        message=str(st.get("message") or "").strip(),
        terminating=objects.deleting(pod),
    )


def _time(value: object) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


def age(t: datetime.datetime | None, now: datetime.datetime) -> str:
    """``45s``, ``12m``, ``5h``, ``3d`` (as ``kubectl`` abbreviates); ``?`` without a time."""
    if t is None:
        return "?"
    seconds = max(0, int((now - t).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes}m"
    hours = minutes // 60
    return f"{hours}h" if hours < 48 else f"{hours // 24}d"


def _generated_from(name: str, owner: str, dashes: int) -> bool:
    """Whether ``name`` is ``<owner>-<x>`` with ``dashes`` more dashes in ``<x>``: the name of a
    ReplicaSet (0: ``<deployment>-<hash>``) or a Pod (1: ``<deployment>-<hash>-<suffix>``) of it."""
    rest = name.removeprefix(f"{owner}-")
    return rest != name and bool(rest) and rest.count("-") == dashes


def events(
    items: Iterable[Obj], names: set[tuple[str, str]], isvc: str, now: datetime.datetime
) -> list[report.EventReport]:
    """The Events about the InferenceService, its children and its pods (also ReplicaSets and pods
    of its Deployments that are gone), newest first."""
    owners = [f"{isvc}-{labels.PREDICTOR}", f"{isvc}-{labels.CANARY}"]
    out: list[report.EventReport] = []
    for e in items:
        regarding = e.get("regarding") or {}
        kind, name = str(regarding.get("kind") or ""), str(regarding.get("name") or "")
        ours = (kind, name) in names or any(
            (kind == "ReplicaSet" and _generated_from(name, o, 0))
            or (kind == "Pod" and _generated_from(name, o, 1))
            for o in owners
        )
        if not ours:
            continue
        series = e.get("series") or {}
        last = (
            _time(series.get("lastObservedTime"))
            or _time(e.get("deprecatedLastTimestamp"))
            or _time(e.get("eventTime"))
            or _time(objects.meta(e).get("creationTimestamp"))
        )
        count = int(series.get("count") or e.get("deprecatedCount") or 1)
        out.append(
            report.EventReport(
                type=str(e.get("type") or ""),
                reason=str(e.get("reason") or ""),
                note=" ".join(str(e.get("note") or "").split()),
                object=f"{kind}/{name}",
                count=count,
                last_seen=last,
                age=age(last, now),
            )
        )
    oldest = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    out.sort(key=lambda ev: (ev.last_seen or oldest, ev.object, ev.reason), reverse=True)
    return out


def conditions(st: Obj) -> tuple[report.ConditionReport, ...]:
    """``status.conditions``, Ready first, then in the order the status lists them."""
    conds = [
        report.ConditionReport(
            type=str(c.get("type") or ""),
            status=str(c.get("status") or "Unknown"),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
            last_transition=str(c.get("lastTransitionTime") or ""),
        )
        for c in st.get("conditions") or ()
    ]
    return tuple(sorted(conds, key=lambda c: c.type != "Ready"))
