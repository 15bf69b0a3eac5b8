"""The summary line of a ``why`` report (pure): serving or not, and the one most specific cause.

The cause, in this order: the spec problem that stopped the comparison; an ``InvalidSpec`` or
``ReconcileFailed`` Ready condition; when serving, the Ready reason (and the first other condition
that is False); when not serving, a failing container (a failed model download in the status' own
words), then an unschedulable pod, of the stable component first; then the Ready reason ("no status
yet" without one). Notes follow when the status is behind the spec or the operator would change
children.
"""

from __future__ import annotations

from mlops_platform.controllers.inferenceservice import labels, pod_problems
from mlops_platform.controllers.inferenceservice.children import model_mount
from mlops_platform.why import report


def _container_cause(pod: report.PodReport, c: report.ContainerReport) -> str:
    if c.init and c.name == model_mount.STORAGE_INITIALIZER:
        ran = c.state == "terminated"
        failed = c.exit_code if ran else c.last_exit_code
        if failed not in (None, 0):  # the status' words: ModelDownloadFailed, the initializer's line
            message, reason = (c.message, c.reason) if ran else (c.last_message, c.last_reason)
            line = pod_problems.download_failure(pod.name, message, failed, reason)
            return f"{pod_problems.MODEL_DOWNLOAD_FAILED}: {line}"
    what = "init container" if c.init else "container"
    detail = c.message
    if c.last_reason or c.last_exit_code is not None:
        last = ", ".join(
            x
            for x in (c.last_reason, f"exit code {c.last_exit_code}" if c.last_exit_code is not None else "")
            if x
        )
        detail = f"{detail} (last terminated: {last})" if detail else f"last terminated: {last}"
    reason = c.reason or "Error"
    return f"{reason}: pod {pod.name} {what} {c.name}" + (f": {detail}" if detail else "")


def _cause(r: report.Report) -> str:
    """The one most specific reason of the state, for the summary line."""
    if r.spec_problem:
        return r.spec_problem
    ready = next((c for c in r.conditions if c.type == "Ready"), None)
    if ready is not None and ready.reason in ("InvalidSpec", "ReconcileFailed"):
        return f"{ready.reason}: {ready.message}"
    if r.serving:
        assert ready is not None
        text = f"{ready.reason}: {ready.message}" if ready.message else ready.reason
        bad = next((c for c in r.conditions if c.type != "Ready" and c.status == "False"), None)
        return f"{text}; {bad.type} is False: {bad.reason}" if bad is not None else text
    # not serving: a failing container, then an unschedulable pod, of the stable component first
    pods = sorted(r.pods, key=lambda p: p.component == labels.CANARY)
    for pod in pods:
        for c in pod.containers:
            if c.failing:
                return _container_cause(pod, c)
    for pod in pods:
        if pod.unscheduled is not None:
            reason, message = pod.unscheduled
            return f"{reason}: pod {pod.name}" + (f": {message}" if message else "")
    if ready is None:
        return "no status yet: no operator has reconciled it (is one running, watching this namespace?)"
    return f"{ready.reason}: {ready.message}" if ready.message else ready.reason


def summary(r: report.Report) -> str:
    line = f"{r.name}: {'serving' if r.serving else 'not serving'} — {_cause(r)}"
    notes = []
    if r.observed_generation is not None and not r.up_to_date:
        notes.append(f"the status is of generation {r.observed_generation}, the spec at {r.generation}")
    if r.changes:
        n = len(r.changes)
        notes.append(f"the operator would change {n} child{'ren' if n > 1 else ''}")
    return line + (f" ({'; '.join(notes)})" if notes else "")
