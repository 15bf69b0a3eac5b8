"""The canary analysis' state machine (pure: no I/O, no clock of its own): from the analysis spec,
the last analysis status, the time, what the cluster shows, the measured checks and a manual action,
the next status, the candidate's weight and the transition to record (issue 42,
``docs/progressive-delivery.md``; the reconciler runs it through :mod:`.analysis_run`).

Phases (``api.analysis_status.PHASES``): ``Progressing`` at step k (the candidate gets
``steps[k].weight`` %), ``Paused`` (the same weight, no evaluation), ``Promoting`` (the candidate
keeps its weight while the stable component rolls out its model) and ``Promoted``, ``RollingBack``
(0 %) and ``RolledBack``, ``Failed`` (0 %: a check cannot be evaluated at all). The transitions and
their guards are ONE table, :data:`TABLE`, read top to bottom: the first row whose phases hold the
current one and whose guard holds decides. The guards read :class:`Facts`, computed once.

Contract of :func:`decide`:

- **Level-based.** Everything it remembers is in the status it returns: a restarted operator
  resumes from the status it reads (the same step, the same interval, the same failed count).
- **Idempotent per interval.** A step is judged once its interval is over (``stepStartTime`` +
  interval <= now); every judgement that counts (a step passed, a check failed) starts a new
  interval or step in the status it returns, so deciding again from that status, at any time before
  the new interval ends and with any measurement, judges nothing: a failed check is never counted
  twice, a step never restarted. Decisions are computed from the status read, never incremented
  from what an event said.
- **No write at steady state.** ``Decision.changed`` is False whenever the status returned equals
  the one read; waiting, and holding for the same reason again, change nothing.
- **Manual actions win** (``Manual.PROMOTE``/``ROLLBACK``: the user's promote or rollback edit), in
  any phase; then a new spec hash (another candidate, another analysis; not ``paused``) restarts
  the analysis at its first step.
- **No decision on no data.** Prometheus unreachable, fewer than ``minRequests`` requests, or a
  check without a value hold the step (``status.hold`` says why); nothing is counted or promoted.
  Only a passed judgement of every step, each with enough requests, promotes.
- Two calls per judgement: at the end of an interval :func:`decide` without a measurement answers
  ``measure=True`` (and changes nothing); the caller measures the step's window
  (:func:`~.analysis_queries.measure`) and decides again with it.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
from collections.abc import Callable
from typing import Literal

import msgspec

from mlops_platform.api import analysis_status, internal
from mlops_platform.api.analysis_status import AnalysisStatus, Hold, Phase, Transition
from mlops_platform.controllers.inferenceservice import analysis_checks as checks
from mlops_platform.controllers.inferenceservice import analysis_messages
from mlops_platform.runtime import clock

PROGRESSING: Phase = "Progressing"
PAUSED: Phase = "Paused"
PROMOTING: Phase = "Promoting"
PROMOTED: Phase = "Promoted"
ROLLING_BACK: Phase = "RollingBack"
ROLLED_BACK: Phase = "RolledBack"
FAILED: Phase = "Failed"
#: how soon a held step is measured again (at most; a shorter interval: half of it)
HOLD_RETRY_SECONDS = 30.0
#: transition reasons recorded as Warning Events
WARNINGS = frozenset({"CheckFailed", "ChecksFailed", "ChecksInvalid"})


class Manual(enum.Enum):
    """The user's own promote or rollback edit, seen by the caller (it always wins)."""

    PROMOTE = "promote"
    ROLLBACK = "rollback"


@dataclasses.dataclass(frozen=True, slots=True)
class Inputs:
    analysis: internal.Analysis
    #: the status read (None: no analysis has run for this canary)
    status: AnalysisStatus | None
    #: the wall clock (timezone-aware)
    now: datetime.datetime
    #: the cluster shows what ``status.weight`` asks for: the live route gives the candidate that
    #: share and the router applied it (for ``Promoting``: the stable component serves the candidate)
    settled: bool
    #: the step's window, measured after a ``measure=True`` decision (None: not measured)
    measurement: checks.Sample | checks.Unreachable | None = None
    manual: Manual | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Decision:
    status: AnalysisStatus
    #: the candidate's share of requests now (percent)
    weight: int
    #: what changed, to record as an Event (``event_type``) and found in ``status.history``
    transition: Transition | None
    #: write ``status`` (it differs from the one read)
    changed: bool
    #: the step's interval is over: measure it and decide again with the measurement
    measure: bool
    #: decide again after this many seconds at the latest (None: when something changes)
    requeue_after: float | None
    #: the situation in a sentence without measured values (a condition's message)
    message: str
    #: the row of :data:`TABLE` that decided
    row: str


@dataclasses.dataclass(frozen=True, slots=True)
class Facts:
    """What the guards read: computed once per decision from the :class:`Inputs`."""

    phase: Phase | None
    manual: Manual | None
    stale: bool
    paused: bool
    settled: bool
    started: bool
    due: bool
    outcome: checks.Outcome | None
    unreachable: bool
    last_step: bool
    limit_reached: bool


def _parse(text: str | None) -> datetime.datetime | None:
    if text is None:
        return None
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:
        return None


def facts(inp: Inputs, verdict: checks.Verdict | None) -> Facts:
    s, a = inp.status, inp.analysis
    stale = s is None or s.spec_hash != a.spec_hash or s.step_index >= len(a.steps)
    start = _parse(s.step_start_time) if s is not None else None
    step = a.steps[s.step_index] if s is not None and not stale else a.steps[0]
    return Facts(
        phase=s.phase if s is not None else None,
        manual=inp.manual,
        stale=stale,
        paused=a.paused,
        settled=inp.settled,
        started=start is not None,
        due=start is not None and (inp.now - start).total_seconds() >= step.seconds,
        outcome=verdict.outcome if verdict is not None else None,
        unreachable=isinstance(inp.measurement, checks.Unreachable),
        last_step=s is not None and s.step_index == len(a.steps) - 1,
        limit_reached=s is not None and s.failed_checks + 1 >= a.failure_limit,
    )


# -- effects ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Ctx:
    inp: Inputs
    facts: Facts
    verdict: checks.Verdict | None

    @property
    def status(self) -> AnalysisStatus:
        assert self.inp.status is not None  # every row but the first ones has a status
        return self.inp.status

    @property
    def step(self) -> internal.AnalysisStep:
        return self.inp.analysis.steps[self.status.step_index]

    @property
    def now(self) -> str:
        return clock.rfc3339(self.inp.now)


Effect = Callable[[_Ctx, str], Decision]


def _decision(
    ctx: _Ctx,
    row: str,
    status: AnalysisStatus,
    *,
    transition: Transition | None = None,
    measure: bool = False,
    requeue_after: float | Literal["written"] | None = "written",
    message: str = "",
) -> Decision:
    """``requeue_after`` "written": at once when the status changes (decided again after the write),
    else when something changes."""
    changed = status != ctx.inp.status
    if requeue_after == "written":
        requeue_after = 0.0 if changed else None
    return Decision(
        status=status,
        weight=status.weight,
        transition=transition,
        changed=changed,
        measure=measure,
        requeue_after=requeue_after,
        message=message or analysis_messages.situation(ctx.inp.analysis, status),
        row=row,
    )


def go(phase: Phase, reason: str, step: Callable[[_Ctx], int] | None = None) -> Effect:
    """A transition to ``phase`` (at step ``step(ctx)``, else the current one), recorded."""

    def effect(ctx: _Ctx, row: str) -> Decision:
        a = ctx.inp.analysis
        s = ctx.inp.status if not ctx.facts.stale else None  # a stale status: only its history counts
        index = step(ctx) if step is not None else (s.step_index if s is not None else 0)
        weight = a.steps[index].weight if phase in (PROGRESSING, PAUSED) else 0
        if phase == PROMOTING:
            weight = s.weight if s is not None else 0  # kept while the stable component rolls out
        v = ctx.verdict
        transition = Transition(
            time=ctx.now,
            phase=phase,
            reason=reason,
            from_=ctx.facts.phase,
            step_index=index,
            weight=weight,
            message=analysis_messages.bounded(analysis_messages.transition(reason, a, index, weight, v)),
        )
        counted = reason in ("CheckFailed", "ChecksFailed")
        history = ctx.inp.status.history if ctx.inp.status is not None else ()
        status = AnalysisStatus(
            phase=phase,
            spec_hash=a.spec_hash,
            step_index=index,
            weight=weight,
            # a failed check starts the step's interval again (the route already carries its weight)
            step_start_time=ctx.now if reason == "CheckFailed" else None,
            failed_checks=(s.failed_checks if s is not None else 0) + counted,
            hold=None,
            measurements=v.measurements if v is not None else (s.measurements if s is not None else ()),
            history=(*history, transition)[-analysis_status.HISTORY_LIMIT :],
        )
        return _decision(ctx, row, status, transition=transition)

    return effect


def stay(ctx: _Ctx, row: str) -> Decision:
    """Nothing changes now; something outside (the route, the user) moves it on."""
    return _decision(ctx, row, ctx.status)


def wait_for_route(ctx: _Ctx, row: str) -> Decision:
    weight = ctx.status.weight
    return _decision(ctx, row, ctx.status, message=f"waiting for the route to give the candidate {weight} %")


def start_interval(ctx: _Ctx, row: str) -> Decision:
    """The route carries the step's weight: its interval begins now (a status change, no transition)."""
    return _decision(ctx, row, msgspec.structs.replace(ctx.status, step_start_time=ctx.now, hold=None))


def wait_interval(ctx: _Ctx, row: str) -> Decision:
    start = _parse(ctx.status.step_start_time)
    assert start is not None
    left = ctx.step.seconds - (ctx.inp.now - start).total_seconds()
    return _decision(ctx, row, ctx.status, requeue_after=max(0.0, left))


def measure(ctx: _Ctx, row: str) -> Decision:
    return _decision(ctx, row, ctx.status, measure=True, requeue_after=None)


def hold(reason: str) -> Effect:
    """The interval is over but nothing can be decided: say why (the same hold: no change)."""

    def effect(ctx: _Ctx, row: str) -> Decision:
        s, m, v = ctx.status, ctx.inp.measurement, ctx.verdict
        why = m.message if isinstance(m, checks.Unreachable) else (v.hold_message if v is not None else "")
        message = analysis_messages.bounded(
            f"step {s.step_index + 1} of {len(ctx.inp.analysis.steps)} holds: {why}"
        )
        same = s.hold is not None and (s.hold.reason, s.hold.message) == (reason, message)
        status = s if same else msgspec.structs.replace(s, hold=Hold(reason, message, ctx.now))
        retry = min(HOLD_RETRY_SECONDS, ctx.step.seconds / 2)
        return _decision(ctx, row, status, requeue_after=retry, message=message)

    return effect


def _next(ctx: _Ctx) -> int:
    return ctx.status.step_index + 1


# -- the table --------------------------------------------------------------------------------------

ANY: frozenset[Phase | None] = frozenset({None, *analysis_status.PHASES})
Out = checks.Outcome
#: the phases of a row that applies to one phase only
_PROGRESSING: frozenset[Phase | None] = frozenset({PROGRESSING})


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    name: str
    phases: frozenset[Phase | None]
    guard: Callable[[Facts], bool]
    effect: Effect


def _always(f: Facts) -> bool:
    return True


TABLE: tuple[Row, ...] = (
    # the user's own edits win, in any phase
    Row("manual-rollback", ANY - {ROLLING_BACK, ROLLED_BACK}, lambda f: f.manual is Manual.ROLLBACK,
        go(ROLLING_BACK, "ManualRollback")),
    Row("manual-promote", ANY - {PROMOTING, PROMOTED}, lambda f: f.manual is Manual.PROMOTE,
        go(PROMOTING, "ManualPromote")),
    # a new canary spec (or none analysed yet) starts at the first step
    Row("start-paused", frozenset({None}), lambda f: f.paused, go(PAUSED, "Started", lambda c: 0)),
    Row("start", frozenset({None}), _always, go(PROGRESSING, "Started", lambda c: 0)),
    Row("restart-paused", ANY, lambda f: f.stale and f.manual is None and f.paused,
        go(PAUSED, "SpecChanged", lambda c: 0)),
    Row("restart", ANY, lambda f: f.stale and f.manual is None, go(PROGRESSING, "SpecChanged", lambda c: 0)),
    Row("finished", frozenset({PROMOTED, ROLLED_BACK, FAILED}), _always, stay),
    Row("promoted", frozenset({PROMOTING}), lambda f: f.settled, go(PROMOTED, "Promoted")),
    Row("promoting", frozenset({PROMOTING}), _always, stay),
    Row("rolled-back", frozenset({ROLLING_BACK}), lambda f: f.settled, go(ROLLED_BACK, "RolledBack")),
    Row("rolling-back", frozenset({ROLLING_BACK}), _always, stay),
    Row("pause", frozenset({PROGRESSING}), lambda f: f.paused, go(PAUSED, "Paused")),
    Row("paused", frozenset({PAUSED}), lambda f: f.paused, stay),
    Row("resume", frozenset({PAUSED}), _always, go(PROGRESSING, "Resumed")),
    # Progressing: the step's interval runs once the route carries its weight, then it is judged
    Row("wait-route", _PROGRESSING, lambda f: not f.started and not f.settled, wait_for_route),
    Row("start-interval", _PROGRESSING, lambda f: not f.started, start_interval),
    Row("wait-interval", _PROGRESSING, lambda f: not f.due, wait_interval),
    Row("measure", _PROGRESSING, lambda f: f.outcome is None and not f.unreachable, measure),
    Row("hold-unreachable", _PROGRESSING, lambda f: f.unreachable, hold("PrometheusUnreachable")),
    Row("invalid", _PROGRESSING, lambda f: f.outcome is Out.INVALID, go(FAILED, "ChecksInvalid")),
    Row("hold-requests", _PROGRESSING, lambda f: f.outcome is Out.NOT_ENOUGH_REQUESTS,
        hold("NotEnoughRequests")),
    Row("roll-back", _PROGRESSING, lambda f: f.outcome is Out.FAILED and f.limit_reached,
        go(ROLLING_BACK, "ChecksFailed")),
    Row("check-failed", _PROGRESSING, lambda f: f.outcome is Out.FAILED,
        go(PROGRESSING, "CheckFailed")),
    Row("hold-no-data", _PROGRESSING, lambda f: f.outcome is Out.NO_DATA, hold("NoData")),
    Row("promote", _PROGRESSING, lambda f: f.outcome is Out.PASSED and f.last_step,
        go(PROMOTING, "AllStepsPassed")),
    Row("next-step", _PROGRESSING, lambda f: f.outcome is Out.PASSED,
        go(PROGRESSING, "StepPassed", _next)),
)  # fmt: skip


def decide(inp: Inputs) -> Decision:
    """The next analysis status, weight and transition (see the module's contract)."""
    s, a = inp.status, inp.analysis
    measured = isinstance(inp.measurement, checks.Sample)
    judged = s is not None and measured and s.spec_hash == a.spec_hash and s.step_index < len(a.steps)
    verdict = None
    if judged and s is not None and isinstance(inp.measurement, checks.Sample):
        verdict = checks.judge(a, a.steps[s.step_index], inp.measurement)
    f = facts(inp, verdict)
    ctx = _Ctx(inp, f, verdict)
    for row in TABLE:
        if f.phase in row.phases and row.guard(f):
            return row.effect(ctx, row.name)
    raise AssertionError(f"no row of the decision table for {f}")  # pragma: no cover: the table is total


def event_type(t: Transition) -> str:
    """``Warning`` for a failed or invalid check, else ``Normal``."""
    return "Warning" if t.reason in WARNINGS else "Normal"
