"""The canary analysis wired into the reconciler (issue 42), on the fake cache and client of
``test_reconciler`` (:class:`~tests.unit.controllers.test_reconciler.World`), a stepped wall clock
and a fake Prometheus: a good candidate walks every step to Promoted without editing the spec, a
failing check rolls back, missing data and an unreachable Prometheus hold the step (saying why), a
restart resumes, the user's own edits win, a new canary spec restarts, and steady state writes
nothing.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

import msgspec
import pytest
from tests.unit.controllers import test_reconciler as tr

from mlops_platform import promapi, promclient, why
from mlops_platform.api import analysis_status, conversion, internal
from mlops_platform.controllers.inferenceservice import analysis_checks as checks
from mlops_platform.controllers.inferenceservice import (
    analysis_measure,
    analysis_queries,
    analysis_run,
    labels,
    reconciler,
)
from mlops_platform.controllers.inferenceservice.children import monitoring, virtualservice
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes

Obj = dict[str, Any]
T0 = datetime.datetime(2026, 12, 24, 12, 0, tzinfo=datetime.UTC)
ANALYSIS: Obj = {
    "steps": [{"weight": 10}, {"weight": 25, "interval": "2m"}, {"weight": 50}],
    "interval": "1m",
    "minRequests": 100,
    "failureLimit": 2,
    "errorRatio": {"max": 0.02},
}
GOOD = {checks.REQUESTS: 5.0, checks.ERROR_RATIO: 0.001}  # 5 req/s: 300 in a minute
BAD = {checks.REQUESTS: 5.0, checks.ERROR_RATIO: 0.2}


def manifest(*, analysis: Obj | None = None, predictor: str = tr.MODEL_V1, canary: bool = True) -> Obj:
    """A v1 InferenceService (the v1alpha1 one of ``test_reconciler`` converted) with an analysis."""
    spec: Obj = {"minReplicas": 4, "maxReplicas": 4, "modelUri": predictor}
    if canary:
        spec["traffic"] = {"canaryVersion": tr.MODEL_V2, "canaryPercent": 0}
    obj = conversion.to_hub(tr.isvc(**spec))
    if canary:
        obj["spec"]["canary"]["analysis"] = copy.deepcopy(ANALYSIS if analysis is None else analysis)
    return obj


class FakeProm:
    """Answers each check's query with ``values[check]`` (a rate for requests), or raises ``error``."""

    def __init__(self, values: dict[str, float] | None = None) -> None:
        self.values: dict[str, float] = dict(GOOD if values is None else values)
        self.error: promclient.QueryError | None = None
        self.asked: list[str] = []
        self._check: dict[str, str] = {}
        spec = analysis_of(manifest())
        for step in spec.steps:
            for q in analysis_queries.step_queries(
                spec, step, namespace=tr.NS, name=tr.NAME, dialect="triton"
            ):
                self._check[q.expr] = q.check

    async def query(self, promql: str) -> list[promapi.Sample]:
        self.asked.append(promql)
        if self.error is not None:
            raise self.error
        check = self._check[promql]
        if check not in self.values:
            return []
        value = self.values[check]
        return [promapi.Sample({}, value)]


def analysis_of(obj: Obj) -> internal.Analysis:
    from mlops_platform import api

    t = api.decode(obj).traffic
    assert t is not None and t.analysis is not None
    return t.analysis


class Run:
    """A :class:`tr.World` with Istio (exact weights), the clock at ``now`` and a fake Prometheus."""

    def __init__(self, obj: Obj | None = None, prom: FakeProm | None = None) -> None:
        self.w = tr.World()
        self.w.install_monitoring()
        self.w.install_istio()
        self.w.put(tr.ISVC, manifest() if obj is None else obj)
        self.now = T0
        self.prom = prom or FakeProm()
        self.woken: list[tuple[str, str]] = []
        self.restart()
        self.events: list[tuple[str, str, str]] = []

    def restart(self) -> None:
        """A new operator process: a new reconciler, nothing in memory but what the cluster holds."""
        measurer = analysis_measure.Measurer(
            self.prom, wake=self.woken.append, reuse_seconds=30, monotonic=lambda: self.now.timestamp()
        )
        self.w.rec = reconciler.InferenceServiceReconciler(
            self.w.cache,
            self.w.client,
            self.w.recorder,
            self.w.kinds,
            self.w.rec.ctx,
            analysis_run.AnalysisRun(measurer, now=lambda: self.now),
        )

    async def settle(self) -> None:
        """Reconcile and play the cluster (measurements finish) until nothing is written or in flight."""
        for _ in range(25):
            self.w.client.reset_calls()
            result = await self.w.rec.reconcile(tr.REQ)
            self.events += [(e.type, e.reason, e.note) for e in self.w.recorder.events]
            self.w.recorder.events.clear()
            measuring = bool(self.w.rec.analysis.measurer._tasks)
            await self.w.rec.analysis.measurer.drain()
            if not self.w.client.calls and not measuring and not result.requeue:
                return
            self.w.mirror()
        raise AssertionError(f"no steady state: {self.w.client.keys}")

    async def after(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)
        await self.settle()

    @property
    def analysis(self) -> Obj:
        value = self.w.status.get("analysis")
        assert isinstance(value, dict), self.w.status
        return value

    def weights(self) -> dict[str, int]:
        return virtualservice.live_weights(self.w.client.stored(tr.VS, tr.NS, tr.NAME))

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.events if r not in ("Reconciled", "Created", "Updated", "Deleted")]

    def edit(self, obj: Obj, generation: int = 2) -> None:
        def change(live: Obj) -> None:
            live["metadata"]["generation"] = generation
            live["spec"] = obj["spec"]

        self.w.edit(tr.ISVC, tr.NAME, change)


def model(w: tr.World, component: str) -> str:
    return tr._model(w.client.stored(tr.DEP, tr.NS, f"{tr.NAME}-{component}"))


async def test_a_good_candidate_walks_every_step_to_promoted_without_editing_the_spec() -> None:
    r = Run()
    await r.settle()
    assert (r.analysis["phase"], r.analysis["stepIndex"], r.analysis["weight"]) == ("Progressing", 0, 10)
    assert r.weights() == {"predictor": 90, "canary": 10}
    assert r.analysis["stepStartTime"] == tr_time(T0)  # the route carries 10 %: the interval begins
    assert tr.brief(r.w.status, "CanaryAnalysis") == ("True", "Progressing")
    await r.after(60)
    assert (r.analysis["stepIndex"], r.weights()) == (1, {"predictor": 75, "canary": 25})
    await r.after(60)  # the second step lasts 2m: not judged yet
    assert r.analysis["stepIndex"] == 1
    await r.after(60)
    assert (r.analysis["stepIndex"], r.weights()) == (2, {"predictor": 50, "canary": 50})
    await r.after(60)
    assert r.analysis["phase"] == "Promoted"
    assert r.reasons() == ["Started", "StepPassed", "StepPassed", "AllStepsPassed", "Promoted"]
    assert all(t == "Normal" for t, reason, _ in r.events if reason in r.reasons())
    # the stable component serves the candidate's model; the canary is gone; the spec is untouched
    assert model(r.w, "predictor") == tr.MODEL_V2
    assert r.w.client.stored(tr.DEP, tr.NS, f"{tr.NAME}-canary") is None
    assert r.w.live(tr.ISVC, tr.NAME)["spec"]["predictor"]["model"]["uri"] == tr.MODEL_V1
    c = tr.cond(r.w.status, "CanaryAnalysis")
    assert (c["status"], c["reason"]) == ("True", "Promoted")
    assert "set spec.predictor.model to the candidate's model and remove spec.canary" in c["message"]
    measured = {m["check"]: m for m in r.analysis["measurements"]}
    assert measured["requests"]["candidate"] == 300 and measured["errorRatio"]["passed"] is True
    # the user makes the spec say so: nothing rolls out again, and the analysis' status goes
    r.edit(manifest(predictor=tr.MODEL_V2, canary=False))
    await r.settle()
    assert not [w for w in r.w.writes if w[0] != "apply" or w[1] == "deployments"]
    assert "analysis" not in r.w.status


def tr_time(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_steady_state_with_an_analysis_makes_no_call_at_all() -> None:
    """Waiting in a step, Paused, Promoted and RolledBack: a reconcile reads and writes nothing."""
    r = Run()
    await r.settle()
    for _ in range(2):
        r.w.client.reset_calls()
        result = await r.w.rec.reconcile(tr.REQ)
        assert r.w.client.calls == [] and result.requeue_after == pytest.approx(60)
    paused = manifest(analysis={**ANALYSIS, "paused": True})
    r.edit(paused)
    await r.settle()
    assert r.analysis["phase"] == "Paused"
    r.w.client.reset_calls()
    assert await r.w.rec.reconcile(tr.REQ) == reconciler.Result()  # paused: nothing to wait for
    assert r.w.client.calls == [] and r.weights()["canary"] == 10
    for finish in ("Promoted", "RolledBack"):
        r = Run(prom=FakeProm(GOOD if finish == "Promoted" else BAD))
        await r.settle()
        await r.after(60)
        await r.after(60 if finish == "RolledBack" else 180)
        if finish == "Promoted":
            await r.after(60)
        assert r.analysis["phase"] == finish
        r.w.client.reset_calls()
        assert await r.w.rec.reconcile(tr.REQ) == reconciler.Result()
        assert r.w.client.calls == []
    r.w.client.reset_calls()
    r.restart()  # a new process reads it all again and writes nothing either
    await r.w.rec.reconcile(tr.REQ)
    assert r.w.client.calls == []


async def test_a_failing_check_counts_then_rolls_back_with_warning_events() -> None:
    r = Run(prom=FakeProm(BAD))
    await r.settle()
    await r.after(60)
    assert (r.analysis["phase"], r.analysis["failedChecks"], r.weights()["canary"]) == ("Progressing", 1, 10)
    await r.after(30)  # the failed check started the interval again: nothing judged twice
    assert r.analysis["failedChecks"] == 1
    await r.after(30)
    assert r.analysis["phase"] == "RolledBack"
    assert r.reasons() == ["Started", "CheckFailed", "ChecksFailed", "RolledBack"]
    warnings = [reason for t, reason, _ in r.events if t == "Warning"]
    assert warnings == ["CheckFailed", "ChecksFailed"]
    assert any("errorRatio 0.2" in note for _, reason, note in r.events if reason == "ChecksFailed"), r.events
    assert r.w.client.stored(tr.DEP, tr.NS, f"{tr.NAME}-canary") is None
    assert model(r.w, "predictor") == tr.MODEL_V1
    c = tr.cond(r.w.status, "CanaryAnalysis")
    assert (c["status"], c["reason"]) == ("False", "RolledBack")
    assert "remove or change spec.canary" in c["message"]


@pytest.mark.parametrize(
    ("values", "reason", "says"),
    [
        (
            {checks.REQUESTS: 0.5, checks.ERROR_RATIO: 0.0},
            "NotEnoughRequests",
            "fewer than minRequests (100)",
        ),
        ({checks.REQUESTS: 5.0}, "NoData", "errorRatio"),
    ],
    ids=["too-few-requests", "no-error-ratio"],
)
async def test_missing_data_holds_the_step_with_a_condition_naming_why(
    values: dict[str, float], reason: str, says: str
) -> None:
    r = Run(prom=FakeProm(values))
    await r.settle()
    await r.after(60)
    assert (r.analysis["phase"], r.analysis["stepIndex"], r.analysis["failedChecks"]) == ("Progressing", 0, 0)
    assert r.analysis["hold"]["reason"] == reason
    c = tr.cond(r.w.status, "CanaryAnalysis")
    assert (c["status"], c["reason"]) == ("False", reason) and says in c["message"], c
    await r.after(300)  # still no data: the same hold, nothing written again
    r.w.client.reset_calls()
    await r.w.rec.reconcile(tr.REQ)
    assert r.w.client.writes == []
    r.prom.values = dict(GOOD)  # the data comes: the step is judged
    await r.after(31)
    assert (r.analysis["stepIndex"], "hold" in r.analysis) == (1, False)


async def test_prometheus_unreachable_holds_and_no_reconcile_waits_for_it() -> None:
    r = Run()
    r.prom.error = promclient.QueryError(
        promclient.UNREACHABLE, "Prometheus monitoring/prometheus: no answer"
    )
    await r.settle()
    await r.after(60)
    assert r.analysis["hold"]["reason"] == "PrometheusUnreachable"
    assert tr.brief(r.w.status, "CanaryAnalysis") == ("False", "PrometheusUnreachable")
    assert r.woken  # the measurement ran in its own task; its end enqueued the InferenceService
    r.prom.error = None
    await r.after(31)
    assert r.analysis["stepIndex"] == 1


async def test_a_reconcile_at_the_end_of_an_interval_does_not_wait_for_the_measurement() -> None:
    r = Run()
    await r.settle()
    r.now += datetime.timedelta(seconds=60)
    r.w.client.reset_calls()
    result = await r.w.rec.reconcile(tr.REQ)
    assert r.w.client.calls == [] and result.requeue_after == r.w.rec.analysis.measurer.fallback_seconds
    assert r.prom.asked == []  # not asked yet: the task runs once the reconcile has returned
    await r.w.rec.analysis.measurer.drain()
    assert r.woken == [(tr.NS, tr.NAME)] and r.prom.asked


async def test_a_restart_mid_analysis_resumes_at_the_same_step_without_counting_twice() -> None:
    r = Run(prom=FakeProm(BAD))
    await r.settle()
    await r.after(60)
    assert (r.analysis["stepIndex"], r.analysis["failedChecks"]) == (0, 1)
    before = copy.deepcopy(r.analysis)
    r.restart()
    r.prom.values = dict(GOOD)
    await r.after(10)  # the new process: the same interval, the same count, nothing written
    assert r.analysis == before
    await r.after(50)
    assert (r.analysis["stepIndex"], r.analysis["failedChecks"]) == (1, 1)
    assert r.reasons().count("CheckFailed") == 1


async def test_a_manual_promote_wins() -> None:
    r = Run()
    await r.settle()
    r.edit(manifest(predictor=tr.MODEL_V2))  # today's manual promote: the predictor is the candidate
    await r.settle()
    assert r.analysis["phase"] == "Promoted"
    assert r.reasons()[-2:] == ["ManualPromote", "Promoted"]
    assert model(r.w, "predictor") == tr.MODEL_V2
    assert r.w.client.stored(tr.DEP, tr.NS, f"{tr.NAME}-canary") is None


async def test_a_manual_rollback_wins_and_the_analysis_status_goes_with_the_canary() -> None:
    r = Run()
    await r.settle()
    await r.after(60)
    r.edit(manifest(canary=False))  # the user removes the canary
    await r.settle()
    assert "ManualRollback" in r.reasons() and "RolledBack" in r.reasons()
    assert r.w.client.stored(tr.DEP, tr.NS, f"{tr.NAME}-canary") is None
    assert "analysis" not in r.w.status  # over, nothing of the canary left: the Events keep it
    assert model(r.w, "predictor") == tr.MODEL_V1


async def test_a_changed_canary_spec_restarts_the_analysis() -> None:
    r = Run()
    await r.settle()
    await r.after(60)
    assert r.analysis["stepIndex"] == 1
    changed = manifest(analysis={**ANALYSIS, "failureLimit": 3})
    r.edit(changed)
    await r.settle()
    assert (r.analysis["stepIndex"], r.analysis["weight"], r.analysis["specHash"]) == (
        0,
        10,
        analysis_of(changed).spec_hash,
    )
    assert r.reasons()[-1] == "SpecChanged" and r.weights()["canary"] == 10


async def test_no_prometheus_configured_holds_saying_so() -> None:
    w = tr.World()
    w.install_istio()
    w.put(tr.ISVC, manifest())
    now = [T0]
    w.rec.analysis.now = lambda: now[0]
    await w.converge()
    now[0] += datetime.timedelta(seconds=60)
    await w.reconcile()
    hold = w.status["analysis"]["hold"]
    assert hold["reason"] == "PrometheusUnreachable" and "no Prometheus is configured" in hold["message"]


def test_effective_builds_the_stable_from_the_candidate_only_for_this_canary_spec() -> None:
    from mlops_platform import api

    isvc = api.decode(manifest())
    a = analysis_of(manifest())
    promoted = analysis_status.AnalysisStatus("Promoted", a.spec_hash)
    built = analysis_run.effective(isvc, promoted)
    assert (built.model_uri, built.traffic) == (tr.MODEL_V2, None)
    other = msgspec.structs.replace(promoted, spec_hash="another")
    assert analysis_run.effective(isvc, other).traffic is not None  # another spec: not promoted
    progressing = analysis_status.AnalysisStatus("Progressing", a.spec_hash, weight=25)
    traffic = analysis_run.effective(isvc, progressing).traffic
    assert traffic is not None and traffic.percent == 25
    assert labels.CANARY == "canary"


def why_of(r: Run) -> why.Report:
    """``why`` on what the fake cluster stores (the InferenceService with its status, the children)."""
    raw = copy.deepcopy(r.w.live(tr.ISVC, tr.NAME))
    raw["status"] = r.w.status
    kinds = (monitoring.PROMETHEUS_RULE, monitoring.SERVICE_MONITOR, virtualservice.KIND)
    crds = {k.crd_name: fakes.crd(k) for k in kinds}
    children = {
        (tr.CHILD_RESOURCES[plural].group_resource, name): obj
        for (plural, _, name), obj in r.w.client.objects.items()
        if plural in tr.CHILD_RESOURCES
    }
    slices, pods = r.w.cache.list(resources.ENDPOINT_SLICE), r.w.cache.list(resources.POD)
    return why.analyze(why.Snapshot(raw, crds, children, slices, pods), now=r.now)


async def test_why_shows_the_analysis_its_values_and_compares_the_children_the_operator_builds() -> None:
    r = Run(prom=FakeProm(BAD))
    await r.settle()
    await r.after(60)
    report = why_of(r)
    assert report.analysis is not None and report.changes == ()  # the children as the analysis has them
    text = why.render_text(report, width=120)
    section = text[text.index("Canary analysis (") : text.index("Children (")]
    assert "step    1 of 3: 10 % to the candidate since" in section
    assert "1 of 2 evaluation(s)" in section
    assert "errorRatio  0.2" in section and "FAILED" in section
    assert "-> Progressing  CheckFailed" in section
    await r.after(60)
    report = why_of(r)
    assert report.changes == ()  # rolled back: no canary built, none live
    assert why.to_json(report)["analysis"]["phase"] == "RolledBack"
    assert "ChecksFailed" in why.render_text(report, width=120)
    good = Run()
    await good.settle()
    for _ in range(4):
        await good.after(120)
    assert good.analysis["phase"] == "Promoted"
    assert why_of(good).changes == ()  # the stable built from the candidate, as the operator does


async def test_removing_only_the_analysis_hands_the_canary_back_to_its_percent() -> None:
    r = Run()
    await r.settle()
    by_hand = manifest()
    del by_hand["spec"]["canary"]["analysis"]
    by_hand["spec"]["canary"]["trafficPercent"] = 40
    r.edit(by_hand)
    await r.settle()
    assert "analysis" not in r.w.status
    assert r.weights() == {"predictor": 60, "canary": 40}
    assert not any(c["type"] == "CanaryAnalysis" for c in r.w.status["conditions"])


def test_setup_gives_the_reconciler_the_query_client_and_a_measurement_enqueues_its_service() -> None:
    from mlops_platform.controllers.inferenceservice import controller
    from mlops_platform.runtime.control import manager as rmanager

    mgr = rmanager.Manager(fakes.FakeClient(), rmanager.Options())
    prom = FakeProm()
    rec = controller.setup(mgr, prometheus=prom)
    measurer = rec.analysis.measurer
    assert measurer.client is prom and measurer.wake is not None
    measurer.wake((tr.NS, tr.NAME))
    [ctl] = [c for c in mgr.controllers if c.name == controller.NAME]
    assert ctl.queue.len() == 1


async def test_waiting_for_the_route_polls_since_the_echo_of_our_own_route_write_is_not_enqueued() -> None:
    r = Run()
    await r.settle()
    r.now += datetime.timedelta(seconds=60)
    await r.w.rec.reconcile(tr.REQ)  # the interval is over: measuring
    await r.w.rec.analysis.measurer.drain()
    await r.w.rec.reconcile(tr.REQ)  # judged: step 2, 25 %, and the route rewritten
    assert (r.analysis["weight"], "stepStartTime" in r.analysis) == (25, False)
    result = await r.w.rec.reconcile(tr.REQ)  # the cache does not hold the new route yet
    assert "stepStartTime" not in r.analysis
    assert result.requeue_after == analysis_run.WAIT_POLL_SECONDS
    r.w.mirror()
    await r.w.rec.reconcile(tr.REQ)  # the poll finds the route applied: the interval begins
    assert r.analysis["stepStartTime"] == tr_time(r.now)
