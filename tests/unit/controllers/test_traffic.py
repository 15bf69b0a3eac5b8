"""The canary state machine (``canary_plan.plan``): its phases on the scenarios of the contract, and its
guards over every input (hypothesis)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import canary_plan, traffic
from mlops_platform.controllers.inferenceservice.canary_plan import (
    CANARY_KEY,
    STABLE_KEY,
    Backend,
    CanaryAction,
    Phase,
)

V7, V8, V9 = "gs://models/bert/7", "gs://models/bert/8", "gs://models/bert/9"


def isvc(model_uri: str = V7, candidate: str | None = None, percent: int = 0) -> internal.InferenceService:
    t = None if candidate is None else internal.Traffic(candidate.rsplit("/", 1)[-1], percent, candidate)
    return internal.InferenceService("m", "ns", "u", 1, "triton", model_uri, traffic=t)


READY_V7 = Backend(True, V7, 2)
NONE = Backend()
B, A, P, S, C = Backend, CanaryAction, Phase, STABLE_KEY, CANARY_KEY


def spec_(model_uri: str = V7, c: str | None = None, p: int = 0) -> internal.InferenceService:
    return isvc(model_uri, c, p)


@pytest.mark.parametrize(
    ("spec", "stable", "canary", "live", "phase", "action", "weights"),
    [
        (spec_(), READY_V7, NONE, None, P.STABLE, A.DELETE, {S: 100}),
        # a candidate at 20 %: no traffic until its pods run it, then 80/20
        (spec_(c=V8, p=20), READY_V7, NONE, None, P.STAGING, A.BUILD, {S: 100}),
        (spec_(c=V8, p=20), READY_V7, B(True, None, 1), None, P.STAGING, A.BUILD,
         {S: 100}),
        (spec_(c=V8, p=20), READY_V7, B(True, V8, 1), None, P.CANARY, A.BUILD,
         {S: 80, C: 20}),
        (spec_(c=V8, p=0), READY_V7, B(True, V8, 1), 20, P.STAGED, A.BUILD,
         {S: 100}),
        (spec_(c=V8, p=100), READY_V7, B(True, V8, 1), 20, P.CANARY, A.BUILD,
         {S: 0, C: 100}),
        # the next candidate: the old one leaves the route at once, the new one enters when ready
        (spec_(c=V9, p=20), READY_V7, B(True, V8, 1), 20, P.STAGING, A.BUILD,
         {S: 100}),
        # promote: modelUri := the candidate, traffic removed; the candidate keeps its share
        (spec_(V8), B(True, None, 2), B(True, V8, 1), 20, P.PROMOTING, A.BUILD,
         {S: 80, C: 20}),
        (spec_(V8), B(True, V8, 2), B(True, V8, 1), 20, P.PROMOTED, A.KEEP,
         {S: 100}),
        (spec_(V8), B(True, V8, 2), B(True, V8, 1), 0, P.PROMOTED, A.DELETE,
         {S: 100}),
        # promote by keeping the candidate at 100 first, then moving modelUri to it (candidate == modelUri)
        (spec_(V8, c=V8, p=100), B(True, None, 2), B(True, V8, 1), 100, P.PROMOTING,
         A.BUILD, {S: 0, C: 100}),
        # roll back: traffic removed; 100 % stable at once, the candidate goes after the route
        (spec_(), READY_V7, B(True, V8, 1), 20, P.ROLLING_BACK, A.KEEP, {S: 100}),
        (spec_(), READY_V7, B(True, V8, 1), 0, P.ROLLING_BACK, A.DELETE, {S: 100}),
        # the stable component cannot serve: the ready candidate takes everything (said in the message)
        (spec_(c=V8, p=20), B(True, V7, 0), B(True, V8, 1), None, P.CANARY,
         A.BUILD, {S: 0, C: 100}),
        # a crashing candidate (no ready replica) never gets traffic
        (spec_(c=V8, p=50), READY_V7, B(True, V8, 0), None, P.STAGING, A.BUILD,
         {S: 100}),
    ],
)  # fmt: skip
def test_the_phases_of_the_contract(
    spec: internal.InferenceService,
    stable: Backend,
    canary: Backend,
    live: int | None,
    phase: Phase,
    action: CanaryAction,
    weights: dict[str, int],
) -> None:
    p = canary_plan.plan(spec, stable, canary, live)
    assert (p.phase, p.canary, p.weights) == (phase, action, weights), p.message
    assert (p.canary_uri is not None) == (action is CanaryAction.BUILD)


URIS = st.sampled_from([V7, V8, V9])
backends = st.builds(Backend, st.booleans(), st.one_of(st.none(), URIS), st.integers(0, 3)).map(
    lambda b: b if b.exists else Backend()
)


@st.composite
def specs(draw: st.DrawFn) -> internal.InferenceService:
    model = draw(URIS)
    candidate = draw(st.one_of(st.none(), URIS))
    return isvc(model, candidate, draw(st.integers(0, 100)) if candidate else 0)


@pytest.mark.parametrize(("stable", "phase"), [(B(True, V8, 2), P.PROMOTED), (READY_V7, P.ROLLING_BACK)])
def test_a_leaving_candidate_stays_until_the_router_has_applied_the_route(
    stable: Backend, phase: Phase
) -> None:
    """The route gives the candidate 0, but the Gateway has not taken in that generation yet: it
    may still send the candidate its share, which would meet a deleted Service (a 500)."""
    spec = spec_(V8) if phase is P.PROMOTED else spec_()
    p = canary_plan.plan(spec, stable, B(True, V8, 1), 0, route_applied=False)
    assert (p.phase, p.canary, p.weights) == (phase, A.KEEP, {S: 100}), p.message
    assert "once the router has applied the updated route" in p.message
    assert canary_plan.plan(spec, stable, B(True, V8, 1), 0, route_applied=True).canary is A.DELETE


@given(specs(), backends, backends, st.one_of(st.none(), st.integers(0, 100)), st.booleans())
def test_the_guards_hold_for_every_input(
    spec: internal.InferenceService, stable: Backend, canary: Backend, live: int | None, applied: bool
) -> None:
    p = canary_plan.plan(spec, stable, canary, live, applied)
    assert sum(p.weights.values()) == 100 and all(w >= 0 for w in p.weights.values())
    by = {STABLE_KEY: stable, CANARY_KEY: canary}
    for key, weight in p.weights.items():
        if weight > 0 and by[key].ready == 0:
            # only the stable backend, and only when no eligible backend could serve instead
            assert key == STABLE_KEY and p.canary_weight == 0, p
    candidate = spec.traffic.model_uri if spec.traffic else None
    if p.canary_weight > 0:
        assert canary.ready > 0, p
        # the candidate it serves: asked for now (a canary), or promoted (modelUri is it)
        assert canary.model_uri in {candidate, spec.model_uri}, p
    if p.canary is CanaryAction.DELETE and canary.exists:
        assert not live and applied, p  # dropped only while the applied route gives it nothing
    if (
        (candidate is None or candidate == spec.model_uri)
        and canary.exists
        and canary.model_uri != spec.model_uri
    ):
        assert p.weights == {STABLE_KEY: 100}, p  # a rollback is 100 % stable at once
    if p.canary is CanaryAction.BUILD:
        assert p.canary_uri in {candidate, spec.model_uri}
    asked = candidate is not None and candidate != spec.model_uri
    may_serve = canary.ready > 0 and (
        (asked and canary.model_uri == candidate and spec.traffic is not None and spec.traffic.percent > 0)
        or (not asked and canary.exists and canary.model_uri == spec.model_uri)
    )
    if stable.ready == 0 and may_serve:
        assert p.weights == {STABLE_KEY: 0, CANARY_KEY: 100}, p  # rather than an outage


def test_a_plan_is_a_value() -> None:
    p = canary_plan.plan(isvc(), READY_V7, NONE, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.phase = Phase.CANARY  # type: ignore[misc]


@pytest.mark.parametrize(
    ("percent", "stable", "cap", "replicas", "share"),
    [
        (20, 4, 5, 1, 20.0),  # 1 of 5
        (50, 3, 5, 3, 50.0),
        (10, 2, 5, 1, 100 / 3),  # the closest the bounds allow: 1 of 3
        (75, 1, 5, 3, 75.0),
        (75, 1, 2, 2, 100 * 2 / 3),  # capped
        (0, 3, 5, 1, 0.0),  # staged: one replica, not in the route
        (100, 3, 5, 1, 100.0),
    ],
)
def test_the_replicas_router_chooses_the_closest_endpoint_share(
    percent: int, stable: int, cap: int, replicas: int, share: float
) -> None:
    split = canary_plan.endpoint_split(percent, stable, cap)
    assert (split.canary_replicas, split.percent) == (replicas, pytest.approx(share))
    assert "ready endpoints" in split.describe(stable)


@given(st.integers(1, 99), st.integers(1, 20), st.integers(1, 20))
def test_no_other_replica_count_is_closer(percent: int, stable: int, cap: int) -> None:
    split = canary_plan.endpoint_split(percent, stable, cap)
    assert 1 <= split.canary_replicas <= cap
    err = abs(split.percent - percent)
    assert all(abs(100 * c / (stable + c) - percent) >= err - 1e-9 for c in range(1, cap + 1))


def _pod(model: str, ready: bool = True, deleting: bool = False) -> dict[str, object]:
    from mlops_platform.controllers.inferenceservice import labels

    meta: dict[str, object] = {"name": "p", "annotations": {labels.MODEL_URI_ANNOTATION: model}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": str(ready)}]}}


def test_a_component_serves_a_model_only_when_its_ready_pods_agree_on_it() -> None:
    b = traffic.pods_backend
    assert b(True, [_pod("m/2"), _pod("m/2")]) == canary_plan.Backend(True, "m/2", 2)
    assert b(True, [_pod("m/2"), _pod("m/1", ready=False)]) == canary_plan.Backend(True, "m/2", 1)
    assert b(True, [_pod("m/2"), _pod("m/1", deleting=True)]) == canary_plan.Backend(True, "m/2", 1)
    assert b(True, [_pod("m/2"), _pod("m/3")]) == canary_plan.Backend(True, None, 0)  # a model rollout
    assert b(True, []) == canary_plan.Backend(True, None, 0)
    assert b(False, []) == canary_plan.Backend()
