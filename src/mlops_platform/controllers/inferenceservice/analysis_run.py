"""The canary analysis in a reconcile (issue 42, ``docs/progressive-delivery.md``): what the state
machine (:mod:`.analysis`) needs from the cluster, and what its decision changes in what is built.

One reconcile, :meth:`AnalysisRun.run`:

1. the analysis status is read from the CR (``status.analysis``); the InferenceService as the
   builders must see it for that status is :func:`effective` (the spec is never edited):

   - ``Progressing``, ``Paused``: the candidate gets the status' weight (``trafficPercent``);
   - ``Promoting``, ``Promoted`` (an automatic promotion of THIS canary spec: the spec hash
     matches): the stable component is built from the candidate's model and no candidate is asked
     for, so the canary plan's promotion runs as after a manual promote (the candidate keeps its
     weight until the stable component serves its model, then it goes);
   - ``RollingBack``, ``RolledBack``, ``Failed``: no candidate is asked for (0 %, then it goes);

2. ``settled`` (:func:`settled`): the cluster shows what the status asks for (from the rollout of
   that effective InferenceService: the live route gives the candidate its weight and the router
   applied it; Promoting: the stable component serves the candidate; RollingBack: the route gives
   it 0);
3. ``manual`` (:func:`manual`): the user's own edit wins: the predictor set to the candidate's model
   (a manual promote), or the analysis or the canary removed from the spec (a manual rollback, or a
   promote when the canary left serves the predictor's model); the analysis removed while the canary
   stays: the user sets its percent by hand, and ``status.analysis`` goes;
4. decide; at the end of an interval the step's window is measured OFF the worker
   (:class:`~.analysis_measure.Measurer`: a task per interval, its InferenceService enqueued when it
   is done) and decided again with the measurement on a later reconcile;
5. :class:`Progress`: the effective InferenceService for the decided status, what to write
   (``status.analysis`` and the ``CanaryAnalysis`` condition), the Event of the transition, and
   when to decide again.

No write at steady state: the decision and the condition are the same as long as the status read
is; ``status.analysis`` is removed once no analysis is in the spec, the analysis has finished and
nothing of the canary is left (the Events keep its history).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Literal

from mlops_platform.api import analysis_status, internal
from mlops_platform.api.analysis_status import AnalysisStatus
from mlops_platform.controllers.inferenceservice import (
    analysis,
    analysis_measure,
    analysis_messages,
    canary_plan,
    traffic,
)
from mlops_platform.controllers.inferenceservice import conditions as isvc_conditions
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime import clock
from mlops_platform.runtime.control.reconcile import Result
from mlops_platform.runtime.objects import Obj

CONDITION = "CanaryAnalysis"
#: what the condition says of a finished analysis: what the user's spec must say now
ASK = {
    analysis.PROMOTED: "make the spec say so: set spec.predictor.model to the candidate's model and "
    "remove spec.canary (nothing rolls out again)",
    analysis.PROMOTING: "then set spec.predictor.model to the candidate's model and remove spec.canary",
    analysis.ROLLED_BACK: "remove or change spec.canary (a new canary spec starts a new analysis)",
    analysis.FAILED: "fix the analysis or remove spec.canary",
}
_FINAL = frozenset({analysis.PROMOTED, analysis.ROLLED_BACK, analysis.FAILED})
#: how soon a decision that waits for the cluster (the route, the stable rollout) is taken again: the
#: watch event that ends the wait may be the echo of the operator's own write, which is not enqueued
WAIT_POLL_SECONDS = 5.0
_WAITING = frozenset({"wait-route", "promoting", "rolling-back"})
Rollout = Callable[[internal.InferenceService], traffic.Rollout]


def candidate(isvc: internal.InferenceService) -> internal.Traffic | None:
    """The canary whose analysis runs: one with an analysis, a candidate that is not the predictor's."""
    t = isvc.traffic
    if t is None or t.analysis is None or t.model_uri in (None, isvc.model_uri):
        return None
    return t


def effective(isvc: internal.InferenceService, s: AnalysisStatus | None) -> internal.InferenceService:
    """The InferenceService the builders build while the analysis is at ``s`` (module doc)."""
    t = candidate(isvc)
    if t is None or t.analysis is None:
        return isvc
    phase = s.phase if s is not None and s.spec_hash == t.analysis.spec_hash else None
    if phase in (analysis.PROGRESSING, analysis.PAUSED):
        assert s is not None
        return dataclasses.replace(isvc, traffic=dataclasses.replace(t, percent=s.weight))
    if phase in (analysis.PROMOTING, analysis.PROMOTED):
        assert t.model_uri is not None
        return dataclasses.replace(
            isvc,
            model_uri=t.model_uri,
            model_format=t.model_format or isvc.model_format,
            model_sha256=t.model_sha256,
            storage=t.storage,
            traffic=None,
        )
    if phase in (analysis.ROLLING_BACK, analysis.ROLLED_BACK, analysis.FAILED):
        return dataclasses.replace(isvc, traffic=None)
    return dataclasses.replace(isvc, traffic=dataclasses.replace(t, percent=0))  # not started yet


def settled(s: AnalysisStatus | None, r: traffic.Rollout) -> bool:
    """Whether the cluster shows what ``s`` asks for (``r``: the rollout of :func:`effective`)."""
    P = canary_plan.Phase
    if s is None:
        return False
    if s.phase in (analysis.PROGRESSING, analysis.PAUSED):
        # the replicas router splits by ready endpoints: the candidate selected is its weight
        weighted = r.route.router is not base.Router.REPLICAS
        on_route = r.live_canary == s.weight if weighted else r.live_canary > 0
        return r.plan.phase is P.CANARY and r.plan.canary_weight == s.weight and on_route and r.applied
    if s.phase == analysis.PROMOTING:
        return r.plan.phase in (P.PROMOTED, P.STABLE)
    if s.phase == analysis.ROLLING_BACK:
        return r.plan.phase in (P.ROLLING_BACK, P.STABLE) and r.live_canary == 0 and r.applied
    return True


def manual(isvc: internal.InferenceService, r: traffic.Rollout) -> analysis.Manual | None:
    """The user's own promote or rollback edit, with an analysis status to end (module doc)."""
    t = isvc.traffic
    if t is not None and t.analysis is not None and t.model_uri == isvc.model_uri:
        return analysis.Manual.PROMOTE
    if candidate(isvc) is not None:
        return None
    promoting = r.plan.phase in (canary_plan.Phase.PROMOTING, canary_plan.Phase.PROMOTED)
    return analysis.Manual.PROMOTE if promoting else analysis.Manual.ROLLBACK


def _remembered(s: AnalysisStatus) -> internal.Analysis:
    """An analysis the spec no longer has, as far as its status tells (to record how it ended)."""
    step = internal.AnalysisStep(max(1, s.weight), "1m", 60)
    return internal.Analysis(steps=(step,) * (s.step_index + 1), spec_hash=s.spec_hash)


@dataclasses.dataclass(frozen=True, slots=True)
class Progress:
    """What the analysis decided for one reconcile (``decision`` None: no analysis)."""

    isvc: internal.InferenceService
    decision: analysis.Decision | None = None
    #: remove ``status.analysis`` (the analysis is over and nothing of the canary is left)
    drop: bool = False

    def inputs(self) -> object:
        """What the settled-inputs memo must see change (the status decided)."""
        return (self.decision.status if self.decision is not None else None, self.drop)

    def apply(self, new: Obj, previous: Obj) -> None:
        """``status.analysis`` and the ``CanaryAnalysis`` condition into the status ``new``."""
        if self.drop or self.decision is None:
            return
        d = self.decision
        new["analysis"] = analysis_status.encode(d.status)
        wanted = condition(d)
        old = [c for c in previous.get("conditions") or () if c.get("type") == CONDITION]
        generation = int(new.get("observedGeneration") or 0)
        new["conditions"] = [
            *new.get("conditions", []),
            *isvc_conditions.merge(old, [wanted], generation=generation),
        ]

    def event(self) -> tuple[Literal["Normal", "Warning"], str, str] | None:
        """The Event of the transition decided (type, reason, message), once it is written."""
        d = self.decision
        if d is None or d.transition is None or not d.changed:
            return None
        warning = analysis.event_type(d.transition) == "Warning"
        return ("Warning" if warning else "Normal"), d.transition.reason, d.transition.message

    def result(self, r: Result) -> Result:
        """``r`` with the analysis' next decision time (the earlier of the two)."""
        d = self.decision
        after = d.requeue_after if d is not None else None
        if after is None or r.requeue:
            return r
        if after <= 0:
            return Result(requeue=True)
        return Result(requeue_after=after if r.requeue_after is None else min(after, r.requeue_after))


def condition(d: analysis.Decision) -> isvc_conditions.Condition:
    """``CanaryAnalysis``: False while a step holds (the hold's reason) or once rolled back or failed."""
    s = d.status
    if s.hold is not None:
        return isvc_conditions.Condition(CONDITION, "False", s.hold.reason, s.hold.message)
    ask = ASK.get(s.phase)
    message = analysis_messages.bounded(f"{d.message}; {ask}" if ask else d.message)
    stopped = s.phase in (analysis.ROLLING_BACK, analysis.ROLLED_BACK, analysis.FAILED)
    ok: isvc_conditions.Status = "False" if stopped else "True"
    return isvc_conditions.Condition(CONDITION, ok, s.phase, message)


class AnalysisRun:
    """Decides the analysis of each reconcile (module doc); holds the measurements in flight."""

    def __init__(
        self,
        measurer: analysis_measure.Measurer,
        now: Callable[[], datetime.datetime] = clock.utcnow,
    ) -> None:
        self.measurer = measurer
        #: the wall clock the steps' intervals are measured with (tests step it)
        self.now = now

    def run(
        self, key: tuple[str, str], raw: Obj, isvc: internal.InferenceService, rollout: Rollout, dialect: str
    ) -> Progress:
        read = analysis_status.decode((raw.get("status") or {}).get("analysis"))
        t = isvc.traffic
        spec = t.analysis if t is not None else None  # with the predictor on the candidate: a manual promote
        if spec is None and read is None:
            return Progress(isvc)
        if spec is None and t is not None and t.model_uri not in (None, isvc.model_uri):
            return Progress(isvc, drop=True)  # the analysis removed, the canary kept: its percent applies
        if read is None and candidate(isvc) is None:
            return Progress(isvc)  # the predictor is already the candidate: nothing to analyse
        now_rollout = rollout(effective(isvc, read))
        if spec is None:
            assert read is not None
            if read.phase in _FINAL:  # over: it goes with the last of the canary
                gone = now_rollout.plan.phase is canary_plan.Phase.STABLE
                return Progress(isvc, None if gone else self._keep(read), drop=gone)
            spec = _remembered(read)
        inp = analysis.Inputs(
            analysis=spec,
            status=read,
            now=self.now(),
            settled=settled(read, now_rollout),
            manual=manual(isvc, now_rollout),
        )
        d = analysis.decide(inp)
        if d.measure and read is not None:
            step = spec.steps[read.step_index]
            ident = (key, read.spec_hash, read.step_index, read.step_start_time or "")
            sample = self.measurer.take(ident, spec, step, dialect)
            if sample is None:  # in flight: its end enqueues the InferenceService
                d = dataclasses.replace(d, requeue_after=self.measurer.fallback_seconds)
            else:
                d = analysis.decide(dataclasses.replace(inp, measurement=sample))
        if d.row in _WAITING and d.requeue_after is None:
            d = dataclasses.replace(d, requeue_after=WAIT_POLL_SECONDS)
        return Progress(effective(isvc, d.status), d)

    @staticmethod
    def _keep(s: AnalysisStatus) -> analysis.Decision:
        """A finished analysis whose canary is still (partly) there: it stays as it is."""
        message = analysis_messages.situation(_remembered(s), s)
        return analysis.Decision(s, s.weight, None, False, False, None, message, "finished")
