"""What ``why`` reports: the frozen records :func:`~mlops_platform.why.analysis.analyze` returns and
the renderers present (plain data, no I/O, no logic beyond derived properties).

A :class:`Report` holds one InferenceService's verdict: its conditions, the effective split, one
:class:`ChildReport` per child slot the operator would compare (its :data:`Action`), a
:class:`PodReport` per pod (with a :class:`ContainerReport` per container) and the
:class:`EventReport` s about it, newest first.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Literal

from mlops_platform.controllers.inferenceservice import pod_problems, reconciler
from mlops_platform.runtime.objects import Obj

#: the path of the desired-hash annotation, as the diff names it
HASH_PATH = f"metadata.annotations.{reconciler.HASH_ANNOTATION}"

Action = Literal["in-sync", "missing", "update", "delete", "crd-missing", "conflict", "unreadable", "foreign"]
#: the actions by which the operator would write (what "would change" counts)
WRITES: frozenset[str] = frozenset({"missing", "update", "delete"})


@dataclasses.dataclass(frozen=True, slots=True)
class ChildReport:
    slot: str  # "predictor/deployment"
    kind: str
    name: str
    action: Action
    #: the differing paths (``update``)
    paths: tuple[str, ...] = ()
    message: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ContainerReport:
    name: str
    init: bool
    ready: bool
    restarts: int
    state: str  # waiting | running | terminated | unknown
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    #: the last termination (lastState.terminated): reason, exit code, message
    last_reason: str = ""
    last_exit_code: int | None = None
    last_message: str = ""

    @property
    def failing(self) -> bool:
        return self.reason in pod_problems.POD_FAILURE_REASONS or (
            self.state == "terminated" and self.exit_code not in (None, 0)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PodReport:
    name: str
    component: str
    phase: str
    ready: bool
    node: str
    #: PodScheduled=False: (reason, message)
    unscheduled: tuple[str, str] | None
    containers: tuple[ContainerReport, ...]
    #: a pod-level reason (Evicted, ...) and message
    reason: str = ""
    message: str = ""
    terminating: bool = False

    @property
    def restarts(self) -> int:
        return sum(c.restarts for c in self.containers)

    @property
    def problem(self) -> bool:
        return (
            self.unscheduled is not None
            or any(c.failing for c in self.containers)
            or self.phase in ("Failed", "Unknown")
        )


@dataclasses.dataclass(frozen=True, slots=True)
class EventReport:
    type: str
    reason: str
    note: str
    object: str  # "Pod/bert-predictor-abc"
    count: int
    last_seen: datetime.datetime | None
    age: str


@dataclasses.dataclass(frozen=True, slots=True)
class ConditionReport:
    type: str
    status: str
    reason: str
    message: str
    last_transition: str


@dataclasses.dataclass(frozen=True, slots=True)
class AlertReport:
    """One alerting rule of the InferenceService's group as Prometheus evaluates it."""

    name: str
    state: str  # firing | pending | inactive
    severity: str
    #: when its (first) alert became pending, its value and summary ("" when inactive)
    since: str = ""
    value: str = ""
    summary: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class TargetReport:
    """One scrape target of the InferenceService's ServiceMonitor."""

    pod: str
    component: str
    health: str  # up | down | unknown
    last_error: str = ""
    last_scrape: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class HealthReport:
    """What Prometheus says (:mod:`~mlops_platform.why.health`)."""

    prometheus: str  # NAMESPACE/SERVICE:PORT
    group: str
    #: whether Prometheus has loaded the rule group
    loaded: bool
    alerts: tuple[AlertReport, ...] = ()
    targets: tuple[TargetReport, ...] = ()
    #: why Prometheus could not be read ("" when it was)
    error: str = ""

    @property
    def firing(self) -> tuple[AlertReport, ...]:
        return tuple(a for a in self.alerts if a.state == "firing")


@dataclasses.dataclass(frozen=True, slots=True)
class AnalysisReport:
    """``status.analysis`` as read (issue 42): where the canary analysis is, why its step holds, the
    values of the last judged interval and the last transitions with the values that decided them."""

    phase: str
    #: "2 of 3" (the spec's steps), or "2" when the spec no longer has the analysis
    step: str
    weight: int
    failed_checks: int
    #: the spec's failureLimit (None: the spec no longer has the analysis)
    failure_limit: int | None
    step_start_time: str | None
    #: "Reason: message (since TIME)" while the step holds, else ""
    hold: str
    measurements: tuple[Obj, ...]
    history: tuple[Obj, ...]
    #: ``status.analysis`` as written (the JSON output)
    raw: Obj


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    namespace: str
    name: str
    summary: str
    serving: bool
    generation: int
    observed_generation: int | None
    url: str | None
    conditions: tuple[ConditionReport, ...]
    #: status.traffic as served (the effective split), empty without a canary
    traffic: tuple[Obj, ...]
    #: the settings assumed (as the operator's flags)
    settings: Mapping[str, str]
    router: str | None
    phase: str | None
    phase_message: str
    children: tuple[ChildReport, ...]
    pods: tuple[PodReport, ...]
    events: tuple[EventReport, ...]
    events_total: int
    #: why the children were not compared (invalid spec, being deleted), else ""
    spec_problem: str
    errors: Mapping[str, str]
    #: what limits the comparison (an input of the canary decision that could not be read)
    caveats: tuple[str, ...] = ()
    #: what Prometheus says (None: monitoring off, or not asked)
    health: HealthReport | None = None
    #: the canary analysis (None: none in the status)
    analysis: AnalysisReport | None = None

    @property
    def changes(self) -> tuple[ChildReport, ...]:
        return tuple(c for c in self.children if c.action in WRITES)

    @property
    def up_to_date(self) -> bool:
        return self.observed_generation == self.generation
