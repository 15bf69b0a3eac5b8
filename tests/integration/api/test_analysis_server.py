"""``spec.canary.analysis`` and ``status.analysis`` (issue 42) on a real kube-apiserver: the schema
and CEL rules generated from the types are evaluated by the server itself (a unit test can only
read them), each refusal names the field, the Python rules agree, and a status the operator writes
is stored as written (read back equal: no write again at steady state).

The one rule the server cannot check (a custom query's ``$(variables)``) is accepted by it and
refused by the operator, as docs/progressive-delivery.md says.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlops_platform import api
from mlops_platform.api import analysis_status, conversion, crd, v1_analysis
from mlops_platform.runtime.transport.client import JSON, ApiError, Client, Resource

V1 = crd.RESOURCE
BETA = Resource(V1.group, "v1beta1", V1.plural, V1.kind)
ANALYSIS: JSON = {
    "steps": [{"weight": 10}, {"weight": 25, "interval": "2m"}, {"weight": 50}],
    "interval": "1m",
    "minRequests": 100,
    "failureLimit": 2,
    "errorRatio": {"max": 0.02, "maxAboveStable": 0.005},
    "latency": {"quantile": 0.99, "maxSeconds": 0.5, "maxTimesStable": 1.2},
    "queries": [{"name": "queue", "query": "max(q{$(selector)})", "comparison": "LessThan", "threshold": 5}],
}


def manifest(version: str = "v1", name: str = "canary", **analysis: Any) -> JSON:
    a = {**copy.deepcopy(ANALYSIS), **analysis}
    for key in [k for k, v in a.items() if v is None]:
        del a[key]
    return {
        "apiVersion": f"mlops.platform/{version}",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "predictor": {"model": {"uri": "s3://models/bert/7"}, "runtime": "seldon"},
            "canary": {"model": {"uri": "s3://models/bert/8"}, "analysis": a},
        },
    }


async def create_strict(client: Client, resource: Resource, namespace: str, obj: JSON) -> JSON:
    return await client.request(
        "POST", resource.path(namespace), params={"fieldValidation": "Strict"}, body=obj, resource="isvc"
    )


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_an_analysis_is_stored_as_written_and_read_as_the_operator_reads_it(
    installed: JSON, admin_client: Client, namespace: str, version: str
) -> None:
    resource = V1 if version == "v1" else BETA
    created = await create_strict(admin_client, resource, namespace, manifest(version, name=f"ok-{version}"))
    stored = await admin_client.get(V1, f"ok-{version}", namespace)
    a = stored["spec"]["canary"]["analysis"]
    assert a["steps"] == ANALYSIS["steps"] and a["paused"] is False  # defaulted by the server
    ours = api.decode(conversion.convert(created, "mlops.platform/v1")).traffic
    theirs = api.decode(stored).traffic
    assert ours is not None and theirs is not None and ours.analysis == theirs.analysis


# (id, analysis changes or a whole object, the server's message: the field first, then the rule's words)
INVALID: list[tuple[str, JSON, tuple[str, ...]]] = [
    ("weights-decrease", manifest(steps=[{"weight": 50}, {"weight": 10}]),
     ("spec.canary.analysis.steps", "must not decrease")),
    ("weight-100", manifest(steps=[{"weight": 100}]), ("spec.canary.analysis.steps[0].weight",)),
    ("no-step", manifest(steps=[]), ("spec.canary.analysis.steps",)),
    ("no-check", manifest(errorRatio=None, latency=None, queries=None),
     ("spec.canary.analysis", "at least one check")),
    ("error-ratio-unbounded", manifest(errorRatio={}), ("spec.canary.analysis.errorRatio", "needs max")),
    ("latency-unbounded", manifest(latency={"quantile": 0.9}),
     ("spec.canary.analysis.latency", "needs maxSeconds")),
    ("interval-too-short", manifest(interval="5s"), ("spec.canary.analysis.interval", "between 10s and 24h")),
    ("interval-too-long", manifest(interval="25h"), ("spec.canary.analysis.interval", "between 10s and 24h")),
    ("step-interval-bad", manifest(steps=[{"weight": 10, "interval": "1h1h"}]),
     ("spec.canary.analysis.steps[0].interval",)),
    ("quantile-1", manifest(latency={"quantile": 1, "maxSeconds": 0.5}),
     ("spec.canary.analysis.latency.quantile",)),
    ("failure-limit-0", manifest(failureLimit=0), ("spec.canary.analysis.failureLimit",)),
    ("queries-same-name",
     manifest(queries=[{"name": "q", "query": "1", "comparison": "LessThan", "threshold": 1}] * 2),
     ("spec.canary.analysis.queries[1]", "Duplicate value")),
    ("too-many-queries",
     manifest(queries=[{"name": f"q{i}", "query": "1", "comparison": "LessThan", "threshold": 1}
                       for i in range(v1_analysis.MAX_QUERIES + 1)]),
     ("spec.canary.analysis.queries",)),
]  # fmt: skip


def _with_percent() -> JSON:
    obj = manifest(name="percent")
    obj["spec"]["canary"]["trafficPercent"] = 10
    return obj


INVALID.append(
    ("percent-beside-analysis", _with_percent(), ("spec.canary.trafficPercent", "leave trafficPercent 0"))
)


@pytest.mark.parametrize(("obj", "expected"), [pytest.param(*case[1:], id=case[0]) for case in INVALID])
@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_every_analysis_rule_is_enforced_by_the_server_naming_the_field(
    installed: JSON, admin_client: Client, namespace: str, version: str, obj: JSON, expected: tuple[str, ...]
) -> None:
    obj = {**copy.deepcopy(obj), "apiVersion": f"mlops.platform/{version}"}
    with pytest.raises(ApiError) as info:
        await create_strict(admin_client, V1 if version == "v1" else BETA, namespace, obj)
    assert info.value.status == 422, info.value.message
    for text in expected:
        assert text in info.value.message, info.value.message
    with pytest.raises((api.ValidationError, conversion.ConversionError)):
        api.decode({**obj, "metadata": {"name": "canary", "namespace": namespace}})
    assert (await admin_client.list(V1, namespace))["items"] == []


async def test_a_query_variable_is_the_operators_to_refuse(
    installed: JSON, admin_client: Client, namespace: str
) -> None:
    bad = [{"name": "q", "query": "max(q{$(pod)})", "comparison": "LessThan", "threshold": 1}]
    created = await create_strict(admin_client, V1, namespace, manifest(name="variable", queries=bad))
    with pytest.raises(api.ValidationError, match=r"queries\[0\]\.query: \$\(pod\) is not a variable"):
        api.decode(created)


async def test_the_analysis_status_is_stored_as_the_operator_writes_it(
    installed: JSON, admin_client: Client, namespace: str
) -> None:
    """Written by server-side apply on the status subresource, as the reconciler does, and read back
    equal (the schema's defaults are written out: the next reconcile finds nothing to write)."""
    await create_strict(admin_client, V1, namespace, manifest(name="status"))
    t = analysis_status.Transition(
        time="2026-12-24T12:00:00Z", phase="Progressing", reason="Started", message="analysis started"
    )
    s = analysis_status.AnalysisStatus(
        phase="Progressing",
        spec_hash="5f0c2a9e1b7d3c44",
        step_index=0,
        weight=10,
        step_start_time="2026-12-24T12:00:10Z",
        hold=analysis_status.Hold("NoData", "step 1 of 3 holds: errorRatio: no data", "2026-12-24T12:01:10Z"),
        measurements=(analysis_status.Measurement("requests", candidate=312.0),),
        history=(t,),
    )
    body = {
        "apiVersion": "mlops.platform/v1",
        "kind": "InferenceService",
        "metadata": {"name": "status", "namespace": namespace},
        "status": {"analysis": analysis_status.encode(s)},
    }
    await admin_client.apply(V1, body, field_manager="mlops-platform", subresource="status")
    stored = await admin_client.get(V1, "status", namespace)
    assert stored["status"]["analysis"] == analysis_status.encode(s)
    assert analysis_status.decode(stored["status"]["analysis"]) == s
    body["status"]["analysis"]["phase"] = "Dancing"
    with pytest.raises(ApiError) as info:
        await admin_client.apply(V1, body, field_manager="mlops-platform", subresource="status")
    assert info.value.status == 422 and "status.analysis.phase" in info.value.message
