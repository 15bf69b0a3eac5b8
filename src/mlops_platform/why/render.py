"""How ``why`` presents a :class:`~mlops_platform.why.report.Report` (pure: no I/O).

- :func:`to_json`: for machines (``-o json``; the shape is in docs/why.md): every child, pod, path
  and Event kept.
- :func:`render_text`: for humans: the summary line first, then the InferenceService, its
  conditions, children, pods, Events and what could not be read. Lines fit the width given (the last
  column of a table wraps, under the row when narrow); at most :data:`MAX_PODS` pods (those with a
  problem first) and :data:`MAX_PATHS` differing paths per child. Styled only when ``color`` is on,
  and widths count the plain text, so the output is the same text either way.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import click

from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.runtime import clock
from mlops_platform.runtime.objects import Obj
from mlops_platform.why import analysis_view, report

#: pods shown in the human output (those with a problem first); the JSON lists all of them
MAX_PODS = 10
#: changed paths listed per child in the human output; the JSON lists all of them
MAX_PATHS = 6


def to_json(r: report.Report) -> Obj:
    """The report for machines (``-o json``); see docs/why.md for the shape."""
    return {
        "name": r.name,
        "namespace": r.namespace,
        "summary": r.summary,
        "serving": r.serving,
        "generation": r.generation,
        "observedGeneration": r.observed_generation,
        "upToDate": r.up_to_date,
        "url": r.url,
        "conditions": [
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": c.last_transition,
            }
            for c in r.conditions
        ],
        "traffic": [dict(t) for t in r.traffic],
        "rollout": None
        if r.router is None
        else {"router": r.router, "phase": r.phase, "message": r.phase_message},
        "settings": dict(r.settings),
        "specProblem": r.spec_problem or None,
        "caveats": list(r.caveats),
        "children": [
            {
                "slot": c.slot,
                "kind": c.kind,
                "name": c.name,
                "action": c.action,
                "paths": list(c.paths),
                "message": c.message,
            }
            for c in r.children
        ],
        "wouldChange": len(r.changes),
        "pods": [_pod_json(p) for p in r.pods],
        "events": [
            {
                "type": e.type,
                "reason": e.reason,
                "note": e.note,
                "object": e.object,
                "count": e.count,
                "lastSeen": None if e.last_seen is None else clock.rfc3339(e.last_seen),
                "age": e.age,
            }
            for e in r.events
        ],
        "eventsTotal": r.events_total,
        "errors": dict(r.errors),
        "health": None if r.health is None else _health_json(r.health),
        "analysis": None if r.analysis is None else dict(r.analysis.raw),
    }


def _health_json(h: report.HealthReport) -> Obj:
    return {
        "prometheus": h.prometheus,
        "group": h.group,
        "loaded": h.loaded,
        "error": h.error or None,
        "alerts": [dataclasses.asdict(a) for a in h.alerts],
        "targets": [
            {
                "pod": t.pod,
                "component": t.component,
                "health": t.health,
                "lastError": t.last_error,
                "lastScrape": t.last_scrape,
            }
            for t in h.targets
        ],
    }


def _pod_json(p: report.PodReport) -> Obj:
    return {
        "name": p.name,
        "component": p.component,
        "phase": p.phase,
        "ready": p.ready,
        "node": p.node or None,
        "restarts": p.restarts,
        "terminating": p.terminating,
        "unscheduled": None
        if p.unscheduled is None
        else {"reason": p.unscheduled[0], "message": p.unscheduled[1]},
        "reason": p.reason or None,
        "message": p.message or None,
        "containers": [
            {
                "name": c.name,
                "init": c.init,
                "ready": c.ready,
                "restartCount": c.restarts,
                "state": c.state,
                "reason": c.reason or None,
                "message": c.message or None,
                "exitCode": c.exit_code,
                "lastTermination": None
                if not (c.last_reason or c.last_exit_code is not None)
                else {
                    "reason": c.last_reason or None,
                    "exitCode": c.last_exit_code,
                    "message": c.last_message or None,
                },
            }
            for c in p.containers
        ],
    }


Style = Mapping[str, Any]
Cell = tuple[str, Style]
_PLAIN: Style = {}
_GOOD: Style = {"fg": "green"}
_BAD: Style = {"fg": "red"}
_WARN: Style = {"fg": "yellow"}
_DIM: Style = {"dim": True}
_STATUS = {"True": _GOOD, "False": _BAD, "Unknown": _WARN}
_ACTIONS: dict[str, tuple[str, Style]] = {
    "in-sync": ("in sync", _GOOD),
    "missing": ("missing", _WARN),
    "update": ("update", _WARN),
    "delete": ("delete", _WARN),
    "crd-missing": ("no CRD", _WARN),
    "conflict": ("conflict", _BAD),
    "unreadable": ("unreadable", _BAD),
    "foreign": ("foreign", _DIM),
}
_MIN_LAST = 30  # narrower than this, the last column goes under the row


class _Out:
    """Lines at a width, styled only when colour is on (widths count the plain text)."""

    def __init__(self, width: int, color: bool) -> None:
        self.width = max(40, width)
        self.color = color
        self.lines: list[str] = []

    def style(self, text: str, s: Style) -> str:
        return click.style(text, **s) if self.color and s and text else text

    def blank(self) -> None:
        self.lines.append("")

    def title(self, text: str, note: str = "") -> None:
        self.blank()
        if not note or len(text) + 1 + len(note) <= self.width:
            self.lines.append(
                self.style(text, {"bold": True}) + (self.style(f" {note}", _DIM) if note else "")
            )
            return
        self.lines.append(self.style(text, {"bold": True}))
        self.wrapped(note, 2, _DIM)

    def wrapped(self, text: str, indent: int, s: Style = _PLAIN, first: str | None = None) -> None:
        """``text`` wrapped at the width, each line indented (the first by ``first`` if given)."""
        lead = " " * indent
        for i, line in enumerate(_wrap(text, self.width - indent)):
            self.lines.append((first if i == 0 and first is not None else lead) + self.style(line, s))

    def table(self, rows: Sequence[Sequence[Cell]], indent: int = 2) -> None:
        """Aligned columns; the last one wraps at the width (under the row when narrow)."""
        if not rows:
            return
        n = len(rows[0])
        widths = [max(len(row[i][0]) for row in rows) for i in range(n - 1)]
        for row in rows:
            cells = [
                self.style(t.ljust(w), s) if t else " " * w for (t, s), w in zip(row, widths, strict=False)
            ]
            head = " " * indent + "  ".join(cells)
            used = indent + sum(widths) + 2 * (n - 1)
            last, s = row[-1]
            if not last:
                self.lines.append(head.rstrip())
            elif self.width - used >= _MIN_LAST:
                self.wrapped(last, used, s, first=head + "  ")
            else:
                self.lines.append(head.rstrip())
                self.wrapped(last, indent + 4, s)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, max(20, width), break_long_words=False, break_on_hyphens=False) or [""]


def _describe_traffic(traffic: Sequence[Obj]) -> str:
    parts = []
    for t in traffic:
        version = t.get("version") or t.get("modelUri") or ""
        ready = t.get("readyReplicas", 0)
        parts.append(f"{t.get('percent', 0)} % {t.get('component')} (version {version}, {ready} ready)")
    return ", ".join(parts)


def render_text(r: report.Report, *, width: int = 100, color: bool = False) -> str:
    """The report for humans: the summary line first, then each part."""
    out = _Out(width, color)
    out.wrapped(r.summary, 0, {"bold": True, **(_GOOD if r.serving else _BAD)})
    _render_isvc(out, r)
    _render_conditions(out, r)
    if r.analysis is not None:
        analysis_view.render(out, r.analysis)
    _render_children(out, r)
    _render_pods(out, r)
    if r.health is not None:
        _render_health(out, r.health)
    _render_events(out, r)
    if r.errors:
        out.title("Not readable", "(RBAC: see docs/why.md)")
        out.table([[(what, _PLAIN), (message, _BAD)] for what, message in sorted(r.errors.items())])
    return "\n".join(out.lines) + "\n"


def _render_isvc(out: _Out, r: report.Report) -> None:
    out.title(f"InferenceService {r.namespace}/{r.name}")
    observed = "none" if r.observed_generation is None else str(r.observed_generation)
    gen = f"{r.generation}, status observed {observed}" + ("" if r.up_to_date else " (behind)")
    traffic = _describe_traffic(r.traffic) if r.traffic else "100 % predictor (no canary)"
    rollout = "-" if r.router is None else f"{r.router} router, {r.phase}: {r.phase_message}"
    out.table(
        [
            [("generation", _PLAIN), (gen, _PLAIN if r.up_to_date else _WARN)],
            [("url", _PLAIN), (r.url or "- (set only while Ready)", _PLAIN)],
            [("traffic", _PLAIN), (traffic, _PLAIN)],
            [("rollout", _PLAIN), (rollout, _PLAIN)],
        ]
    )


def _render_conditions(out: _Out, r: report.Report) -> None:
    out.title("Conditions")
    if r.conditions:
        out.table(
            [
                [
                    (c.type, _PLAIN),
                    (c.status, _STATUS.get(c.status, _PLAIN)),
                    (c.reason, _PLAIN),
                    (c.message, _PLAIN),
                ]
                for c in r.conditions
            ]
        )
    else:
        out.wrapped("none: no operator has written a status", 2, _WARN)


def _render_children(out: _Out, r: report.Report) -> None:
    flags = " ".join(f"{k}={v}" for k, v in r.settings.items())
    out.title("Children", f"(what the operator would change now, assuming {flags})")
    if r.spec_problem:
        out.wrapped(f"not compared: {r.spec_problem}", 2, _WARN)
    for caveat in r.caveats:
        out.wrapped(caveat, 2, _WARN)
    rows: list[list[Cell]] = []
    for c in r.children:
        label, s = _ACTIONS[c.action]
        detail = c.message
        if c.paths == (report.HASH_PATH,):
            detail = (
                f"only {report.HASH_PATH} differs: the operator stopped setting a field; its apply removes it"
            )
        elif c.paths:
            shown = ", ".join(c.paths[:MAX_PATHS])
            more = len(c.paths) - MAX_PATHS
            detail = f"differs at {shown}" + (f" and {more} more" if more > 0 else "")
        rows.append([(label, s), (f"{c.kind}/{c.name}", _PLAIN), (detail, _PLAIN)])
    out.table(rows)


def _render_pods(out: _Out, r: report.Report) -> None:
    out.title("Pods", f"({len(r.pods)}; label {labels.INFERENCESERVICE}={r.name})")
    if not r.pods:
        out.wrapped("none", 2, _DIM)
    shown_pods = sorted(r.pods, key=lambda p: not p.problem)[:MAX_PODS]
    for p in shown_pods:
        ready = ("ready", _GOOD) if p.ready else ("not ready", _BAD if p.problem else _WARN)
        node = f"node {p.node}" if p.node else "no node"
        extra = ", terminating" if p.terminating else ""
        out.table(
            [[(p.name, _PLAIN), (p.phase, _PLAIN), ready, (f"restarts {p.restarts}, {node}{extra}", _PLAIN)]]
        )
        if p.unscheduled is not None:
            reason, message = p.unscheduled
            out.wrapped(f"{reason}: {message}" if message else reason, 4, _BAD)
        if p.reason or p.message:
            out.wrapped(": ".join(x for x in (p.reason, p.message) if x), 4, _BAD)
        for container in p.containers:
            out.wrapped(_describe_container(container), 4, _BAD if container.failing else _PLAIN)
    if len(r.pods) > len(shown_pods):
        out.wrapped(f"... and {len(r.pods) - len(shown_pods)} more (-o json lists all)", 2, _DIM)


def _render_health(out: _Out, h: report.HealthReport) -> None:
    out.title("Monitoring", f"(Prometheus {h.prometheus}, rule group {h.group})")
    if h.error:
        out.wrapped(f"Prometheus not readable: {h.error}", 2, _WARN)
        return
    if not h.loaded:
        out.wrapped("rule group not loaded by Prometheus (yet): its alerts cannot fire", 2, _WARN)
    rows: list[list[Cell]] = []
    for a in h.alerts:
        s = _BAD if a.state == "firing" else _WARN if a.state == "pending" else _GOOD
        since = f"since {a.since}" if a.since else ""
        rows.append(
            [
                (a.name, _PLAIN),
                (a.state, s),
                (a.severity, _PLAIN),
                (" ".join(filter(None, [since, a.summary])), _PLAIN),
            ]
        )
    if rows:
        out.table(rows)
    up = sum(t.health == "up" for t in h.targets)
    out.wrapped(
        f"targets: {up} of {len(h.targets)} up", 2, _GOOD if h.targets and up == len(h.targets) else _WARN
    )
    out.table(
        [
            [(t.pod, _PLAIN), (t.health, _GOOD if t.health == "up" else _BAD), (t.last_error, _PLAIN)]
            for t in h.targets
        ],
        indent=4,
    )


def _render_events(out: _Out, r: report.Report) -> None:
    out.title(
        "Events", f"(newest first, {len(r.events)} of {r.events_total}: age, type, reason, object: note)"
    )
    rows: list[list[Cell]] = []
    for e in r.events:
        when = e.age + (f" (x{e.count})" if e.count > 1 else "")
        kind = _WARN if e.type == "Warning" else _PLAIN
        rows.append([(when, _PLAIN), (e.type, kind), (e.reason, _PLAIN), (f"{e.object}: {e.note}", _PLAIN)])
    out.table(rows)
    if not rows:
        out.wrapped("none", 2, _DIM)


def _describe_container(c: report.ContainerReport) -> str:
    what = "init container" if c.init else "container"
    state = c.state + (f" {c.reason}" if c.reason else "")
    if c.exit_code is not None:
        state += f" (exit code {c.exit_code})"
    text = f"{what} {c.name}: {'ready' if c.ready else 'not ready'}, {state}"
    if c.message:
        text += f": {c.message}"
    text += f"; restarts {c.restarts}"
    if c.last_reason or c.last_exit_code is not None:
        code = f", exit code {c.last_exit_code}" if c.last_exit_code is not None else ""
        text += f"; last terminated: {c.last_reason or 'unknown'}{code}"
        if c.last_message:
            text += f": {c.last_message}"
    return text
