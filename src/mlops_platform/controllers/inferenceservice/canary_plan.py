"""The canary state machine: from what is asked (v1 ``spec.predictor.model`` and ``spec.canary``,
whose ``spec.canary.trafficPercent`` is ``canaryPercent`` below; v1alpha1 ``spec.modelUri`` and
``spec.traffic``) and what the cluster shows (each component's rolled-out model and ready
replicas, the route's live weights), which components must exist and which weights the route must
carry now. Pure: no I/O. :func:`plan` decides from :class:`Backend` s (what each component shows);
:mod:`~mlops_platform.controllers.inferenceservice.traffic` reads those from the live objects and
turns the plan into components and a route.

Phases (:class:`Phase`), each with its guard and what it decides:

- ``STABLE``: no candidate (no ``traffic``, no ``canaryVersion``, or the candidate is ``modelUri``)
  and no canary component left: the route is 100 % stable.
- ``STAGING``: a candidate is asked for, its component exists or is being created, but it has not
  rolled out the candidate with a ready replica yet: 100 % stable (a backend enters the route only
  once it can serve).
- ``STAGED``: the candidate is ready and ``canaryPercent`` is 0: pods up, no traffic.
- ``CANARY``: the candidate is ready and ``canaryPercent`` p > 0: ``100 - p`` / ``p``.
- ``PROMOTING``: no candidate is asked for, a canary component is left, and it serves what
  ``modelUri`` now asks for (the user promoted it): the canary keeps the weight the route gives it
  now until the stable component has rolled out that model with a ready replica; then
  ``PROMOTED``.
- ``PROMOTED``: the stable component serves the promoted model: 100 % stable; the canary
  component is deleted once the live route gives it 0 and the router has applied that route
  (never before: no traffic gap, and no request routed to a Service that is gone).
- ``ROLLING_BACK``: no candidate is asked for and the canary serves something else: 100 % stable at
  once; the canary component is deleted once the live route gives it 0 and the router applied it.

Guards that hold in every phase (a property test checks them over all inputs):

- the weights are integers summing to 100; a weight > 0 goes only to a backend with a ready
  replica, unless no backend has one (then the stable backend keeps 100: nothing can serve);
- the candidate gets traffic only once it has rolled out the candidate's model;
- the canary component is dropped only while the live route gives it no traffic and the router
  has applied that route (``route_applied``: a Gateway controller reported on the route's
  generation; a Gateway API implementation answers 500 for a backend whose Service is gone);
- when the stable backend has no ready replica but the candidate has and may take traffic (a
  canary above 0 %, or the promoted model), the candidate takes the whole route (the split cannot
  be honoured; the message says so).
"""

from __future__ import annotations

import dataclasses
import enum

from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import labels

STABLE_KEY = labels.PREDICTOR
CANARY_KEY = labels.CANARY


class Phase(enum.Enum):
    STABLE = "Stable"
    STAGING = "Staging"
    STAGED = "Staged"
    CANARY = "Canary"
    PROMOTING = "Promoting"
    PROMOTED = "Promoted"
    ROLLING_BACK = "RollingBack"


@dataclasses.dataclass(frozen=True, slots=True)
class Backend:
    """What the cluster shows of one component: the model all its replicas run (None while a
    rollout is under way or when it does not exist) and how many replicas are ready."""

    exists: bool = False
    model_uri: str | None = None
    ready: int = 0


class CanaryAction(enum.Enum):
    BUILD = "build"  # the canary component as desired, serving Plan.canary_uri
    KEEP = "keep"  # leave the live canary component as it is (it is leaving; the route goes first)
    DELETE = "delete"  # no canary component (a live one is deleted)


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    phase: Phase
    canary: CanaryAction
    #: the canary component's model with CanaryAction.BUILD, else None
    canary_uri: str | None
    #: the route's weights now, by component key (sum 100)
    weights: dict[str, int]
    message: str

    @property
    def canary_weight(self) -> int:
        return self.weights.get(CANARY_KEY, 0)


def _split(stable: Backend, canary: Backend, canary_share: int, why: str) -> tuple[dict[str, int], str]:
    """``canary_share`` to the canary, the rest to stable, moved to whichever can serve."""
    if canary_share <= 0:
        return {STABLE_KEY: 100}, why
    if stable.ready == 0 and canary.ready > 0:
        return {STABLE_KEY: 0, CANARY_KEY: 100}, (
            f"{why}; the stable component has no ready replica, so the candidate takes all requests"
        )
    if canary.ready == 0:
        return {STABLE_KEY: 100}, f"{why}; the candidate has no ready replica: 100 % stable"
    return {STABLE_KEY: 100 - canary_share, CANARY_KEY: canary_share}, why


def plan(
    isvc: internal.InferenceService,
    stable: Backend,
    canary: Backend,
    live_canary_weight: int | None,
    route_applied: bool = True,
) -> Plan:
    """The decision now. ``live_canary_weight``: what the live route gives the canary (None: no
    route, or a router without weights; then it counts as 0 once the route is rewritten);
    ``route_applied``: whether the router has applied the live route's current generation (False:
    it may still route by an older one, so a candidate that is leaving stays)."""
    t = isvc.traffic
    candidate = t.model_uri if t is not None else None
    live_weight = live_canary_weight or 0
    build = CanaryAction.BUILD
    if candidate is not None and candidate != isvc.model_uri:
        percent = t.percent if t is not None else 0
        if canary.model_uri != candidate or canary.ready == 0:
            state = "rolling out" if canary.exists else "being created"
            return Plan(
                Phase.STAGING,
                build,
                candidate,
                {STABLE_KEY: 100},
                f"candidate {candidate} {state} ({canary.ready} ready): no traffic until it is ready",
            )
        if percent == 0:
            return Plan(
                Phase.STAGED, build, candidate, {STABLE_KEY: 100}, f"candidate {candidate} staged: no traffic"
            )
        weights, message = _split(stable, canary, percent, f"{percent} % to candidate {candidate}")
        return Plan(Phase.CANARY, build, candidate, weights, message)
    if not canary.exists:
        return Plan(Phase.STABLE, CanaryAction.DELETE, None, {STABLE_KEY: 100}, "no canary")
    leave = CanaryAction.KEEP if live_weight > 0 or not route_applied else CanaryAction.DELETE
    if live_weight > 0:
        gone = "the candidate goes once the route is updated"
    elif not route_applied:
        gone = "the candidate goes once the router has applied the updated route"
    else:
        gone = "candidate removed"
    if canary.model_uri is not None and canary.model_uri == isvc.model_uri:
        if stable.model_uri != isvc.model_uri or stable.ready == 0:
            # it serves the promoted model: when the stable backend cannot serve, it takes all
            share = 100 if stable.ready == 0 else live_weight
            weights, message = _split(
                stable,
                canary,
                share,
                f"promoting {isvc.model_uri}: the candidate keeps {share} % until the stable "
                "component has rolled it out",
            )
            return Plan(Phase.PROMOTING, build, canary.model_uri, weights, message)
        return Plan(Phase.PROMOTED, leave, None, {STABLE_KEY: 100}, f"promoted {isvc.model_uri}: {gone}")
    return Plan(Phase.ROLLING_BACK, leave, None, {STABLE_KEY: 100}, f"rolled back to 100 % stable: {gone}")


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointSplit:
    """The replicas router's answer: how many canary replicas, and the share of ready endpoints the
    candidate then has (what status reports: it cannot be exactly ``p`` in general)."""

    canary_replicas: int
    percent: float

    def describe(self, stable_replicas: int) -> str:
        total = stable_replicas + self.canary_replicas
        return f"candidate {self.canary_replicas} of {total} ready endpoints = {self.percent:.0f} %"


def endpoint_split(percent: int, stable_replicas: int, max_canary: int) -> EndpointSplit:
    """The canary replica count ``c`` in ``1..max_canary`` whose endpoint share ``c / (s + c)`` is
    closest to ``percent`` (ties: fewer replicas), for ``s`` stable replicas; ``percent`` 0 or
    100 and ``s`` 0 are the route's business (the umbrella Service then selects one component), so
    the canary keeps one replica (staged or serving alone)."""
    if percent <= 0 or percent >= 100 or stable_replicas <= 0:
        return EndpointSplit(1, 0.0 if percent <= 0 else 100.0)
    want = percent / 100
    best = min(range(1, max(1, max_canary) + 1), key=lambda c: (abs(c / (stable_replicas + c) - want), c))
    return EndpointSplit(best, 100 * best / (stable_replicas + best))
