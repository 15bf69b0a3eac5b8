"""``why``'s view of a canary analysis (issue 42, pure): :func:`report_of` reads ``status.analysis``
into a :class:`~mlops_platform.why.report.AnalysisReport` (with the spec's step count and failure
limit when the spec still has the analysis); :func:`lines` gives the rows the human output shows:
where it is, why its step holds, the values of the last judged interval and the last transitions
with the values that decided them (oldest first, as in the status)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from mlops_platform.api import analysis_status, internal
from mlops_platform.runtime.objects import Obj
from mlops_platform.why import report


def report_of(status: Obj, isvc: internal.InferenceService | None) -> report.AnalysisReport | None:
    """``status.analysis`` as read (None when absent or not an analysis status)."""
    raw = status.get("analysis")
    s = analysis_status.decode(raw)
    if s is None or not isinstance(raw, dict):
        return None
    spec = isvc.traffic.analysis if isvc is not None and isvc.traffic is not None else None
    same = spec is not None and spec.spec_hash == s.spec_hash
    step = f"{s.step_index + 1} of {len(spec.steps)}" if spec is not None and same else str(s.step_index + 1)
    hold = f"{s.hold.reason}: {s.hold.message} (since {s.hold.since})" if s.hold is not None else ""
    return report.AnalysisReport(
        phase=s.phase,
        step=step,
        weight=s.weight,
        failed_checks=s.failed_checks,
        failure_limit=spec.failure_limit if spec is not None and same else None,
        step_start_time=s.step_start_time,
        hold=hold,
        measurements=tuple(analysis_status.encode(s)["measurements"]),
        history=tuple(analysis_status.encode(s)["history"]),
        raw=dict(raw),
    )


Style = Mapping[str, Any]
Cell = tuple[str, Style]
_PLAIN: Style = {}
_BAD: Style = {"fg": "red"}
_WARN: Style = {"fg": "yellow"}
_DIM: Style = {"dim": True}


class Out(Protocol):
    """What :func:`render` writes to (``render._Out``)."""

    def title(self, text: str, note: str = "") -> None: ...
    def wrapped(self, text: str, indent: int, s: Style = ..., first: str | None = None) -> None: ...
    def table(self, rows: Sequence[Sequence[Cell]], indent: int = 2) -> None: ...


def render(out: Out, a: report.AnalysisReport) -> None:
    """The human output's section: where it is, the last judged interval, the last transitions."""
    out.title("Canary analysis", "(status.analysis)")
    bad = a.phase in ("RolledBack", "RollingBack", "Failed")
    out.table(
        [[(what, _PLAIN), (value, _BAD if what == "phase" and bad else _WARN if what == "holds" else _PLAIN)]
         for what, value in summary_rows(a)]
    )  # fmt: skip
    measured = measurement_rows(a)
    if measured:
        out.wrapped("last judged interval (check, candidate, stable, limit):", 2, _DIM)
        out.table([[(c, _PLAIN) for c in row[:4]] + [(row[4], _BAD if row[4] == "FAILED" else _PLAIN)]
                   for row in measured], indent=4)  # fmt: skip
    if a.history:
        out.wrapped("last transitions (oldest first):", 2, _DIM)
        out.table([[(c, _PLAIN) for c in row] for row in transition_rows(a)], indent=4)


def _number(value: object) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def summary_rows(a: report.AnalysisReport) -> list[tuple[str, str]]:
    """(what, value) rows: the phase, the step and its weight, the failed evaluations, the hold."""
    limit = f" of {a.failure_limit}" if a.failure_limit is not None else ""
    since = f" since {a.step_start_time}" if a.step_start_time else " (waiting for the route)"
    rows = [
        ("phase", a.phase),
        ("step", f"{a.step}: {a.weight} % to the candidate{since if a.phase == 'Progressing' else ''}"),
        ("failed", f"{a.failed_checks}{limit} evaluation(s)"),
    ]
    if a.hold:
        rows.append(("holds", a.hold))
    return rows


def measurement_rows(a: report.AnalysisReport) -> list[tuple[str, str, str, str, str]]:
    """(check, candidate, stable, limit, passed) of the last judged interval."""
    out = []
    for m in a.measurements:
        passed = {True: "passed", False: "FAILED", None: "no data"}[m.get("passed")]
        if m.get("check") == "requests":
            passed = ""
        out.append(
            (
                str(m.get("check")),
                _number(m.get("candidate")),
                _number(m.get("stable")),
                _number(m.get("limit")),
                passed,
            )
        )
    return out


def transition_rows(a: report.AnalysisReport) -> list[tuple[str, str, str, str]]:
    """(time, from -> to, reason, message) of the last transitions, oldest first."""
    return [
        (
            str(t.get("time", "")),
            f"{t.get('from') or '-'} -> {t.get('phase')}",
            str(t.get("reason", "")),
            str(t.get("message", "")),
        )
        for t in a.history
    ]
