"""``spec.canary.analysis`` (v1, v1beta1): every bad value is refused naming its field, by the types,
by the Python rules and, where CEL can say it, by a rule in the schema; the internal model; the spec
hash; v1alpha1 keeps it through the conversion and across its own edits."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from mlops_platform import api
from mlops_platform.api import conversion, crd, v1, v1_analysis
from mlops_platform.testing import conversion as gen

JSON = dict[str, Any]

ANALYSIS: JSON = {
    "steps": [{"weight": 10}, {"weight": 25, "interval": "2m"}, {"weight": 50}],
    "interval": "1m",
    "minRequests": 100,
    "failureLimit": 2,
    "errorRatio": {"max": 0.01, "maxAboveStable": 0.005},
    "latency": {"quantile": 0.99, "maxSeconds": 0.5, "maxTimesStable": 1.2},
    "queries": [
        {
            "name": "queue-depth",
            "query": "max(queue{$(selector)}) - max(queue{$(stableSelector)}) + 0*vector($(window))",
            "comparison": "LessThanOrEqual",
            "threshold": 3,
        }
    ],
}


def analysis_of(obj: JSON) -> api.internal.Analysis:
    traffic = api.decode(obj).traffic
    assert traffic is not None and traffic.analysis is not None
    return traffic.analysis


def isvc(version: str = "v1", **canary: Any) -> JSON:
    return {
        "apiVersion": f"mlops.platform/{version}",
        "kind": "InferenceService",
        "metadata": {"name": "bert", "namespace": "ml"},
        "spec": {
            "predictor": {"model": {"uri": "s3://models/bert/7"}, "runtime": "seldon"},
            "canary": {"model": {"uri": "s3://models/bert/8"}, "analysis": copy.deepcopy(ANALYSIS), **canary},
        },
    }


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_an_analysis_reaches_the_internal_model_each_step_with_its_interval(version: str) -> None:
    traffic = api.decode(isvc(version)).traffic
    assert traffic is not None and traffic.percent == 0
    a = traffic.analysis
    assert a is not None
    assert [(s.weight, s.interval, s.seconds) for s in a.steps] == [
        (10, "1m", 60),
        (25, "2m", 120),
        (50, "1m", 60),
    ]
    assert (a.min_requests, a.failure_limit, a.paused) == (100, 2, False)
    assert (a.error_ratio, a.latency) == (
        api.internal.ErrorRatioCheck(0.01, 0.005),
        api.internal.LatencyCheck(0.99, 0.5, 1.2),
    )
    assert [q.name for q in a.queries] == ["queue-depth"]
    assert len(a.spec_hash) == 16


def test_the_defaults() -> None:
    obj = isvc()
    obj["spec"]["canary"]["analysis"] = {"steps": [{"weight": 5}], "errorRatio": {"max": 0.02}}
    a = analysis_of(obj)
    assert (a.steps[0].interval, a.min_requests, a.failure_limit, a.latency, a.queries) == (
        "1m",
        20,
        1,
        None,
        (),
    )


def _set(obj: JSON, path: str, value: Any) -> None:
    node = obj["spec"]["canary"]
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


_DELETE = object()


def _query(name: str) -> JSON:
    return {"name": name, "query": "x", "comparison": "LessThan", "threshold": 1}


#: (id, where under spec.canary, the bad value, the field the error names under spec.canary, its words)
BAD: list[tuple[str, str, Any, str, str]] = [
    ("weight-0", "analysis.steps.0.weight", 0, "analysis.steps[0].weight", ">= 1"),
    ("weight-100", "analysis.steps.2.weight", 100, "analysis.steps[2].weight", "<= 99"),
    ("weights-decrease", "analysis.steps.2.weight", 20, "analysis.steps[2].weight", "not decrease"),
    ("no-steps", "analysis.steps", [], "analysis.steps", "length >= 1"),
    ("too-many-steps", "analysis.steps", [{"weight": 1}] * 21, "analysis.steps", "length <= 20"),
    ("step-unknown", "analysis.steps.0.wait", "1m", "analysis.steps[0]", "unknown field"),
    ("interval-unit", "analysis.interval", "1d", "analysis.interval", "matching regex"),
    ("interval-short", "analysis.interval", "5s", "analysis.interval", "between 10s and 24h"),
    ("interval-long", "analysis.interval", "25h", "analysis.interval", "between 10s and 24h"),
    ("step-interval", "analysis.steps.1.interval", "0s", "analysis.steps[1].interval", "between"),
    ("step-interval-order", "analysis.steps.1.interval", "1s1m", "analysis.steps[1].interval", "regex"),
    ("min-requests", "analysis.minRequests", -1, "analysis.minRequests", ">= 0"),
    ("failure-limit", "analysis.failureLimit", 0, "analysis.failureLimit", ">= 1"),
    ("error-max", "analysis.errorRatio.max", 1.5, "analysis.errorRatio.max", "<= 1"),
    (
        "error-margin",
        "analysis.errorRatio.maxAboveStable",
        -0.1,
        "analysis.errorRatio.maxAboveStable",
        ">= 0",
    ),
    ("error-empty", "analysis.errorRatio", {}, "analysis.errorRatio", "needs max, maxAboveStable"),
    ("quantile-1", "analysis.latency.quantile", 1, "analysis.latency.quantile", "< 1"),
    ("latency-0", "analysis.latency.maxSeconds", 0, "analysis.latency.maxSeconds", "> 0"),
    ("latency-times", "analysis.latency.maxTimesStable", 0.5, "analysis.latency.maxTimesStable", ">= 1"),
    ("latency-empty", "analysis.latency", {"quantile": 0.9}, "analysis.latency", "needs maxSeconds"),
    ("query-name", "analysis.queries.0.name", "Queue_Depth", "analysis.queries[0].name", "regex"),
    ("query-empty", "analysis.queries.0.query", "", "analysis.queries[0].query", "length >= 1"),
    ("query-variable", "analysis.queries.0.query", "x{$(pod)}", "analysis.queries[0].query", "$(pod)"),
    ("query-comparison", "analysis.queries.0.comparison", "<=", "analysis.queries[0].comparison", "enum"),
    ("query-threshold", "analysis.queries.0.threshold", "3", "analysis.queries[0].threshold", "`float`"),
    ("query-missing", "analysis.queries.0.threshold", _DELETE, "analysis.queries[0]", "threshold"),
    ("too-many-queries", "analysis.queries", [_query(f"q{i}") for i in range(6)], "analysis.queries", "<= 5"),
    ("queries-same-name", "analysis.queries", [_query("q")] * 2, "analysis.queries[1].name", "another query"),
    ("paused", "analysis.paused", "yes", "analysis.paused", "bool"),
    ("percent-by-hand", "trafficPercent", 10, "trafficPercent", "leave trafficPercent 0"),
]


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
@pytest.mark.parametrize(("where", "value", "field", "words"), [pytest.param(*b[1:], id=b[0]) for b in BAD])
def test_every_bad_value_is_refused_naming_its_field(
    version: str, where: str, value: Any, field: str, words: str
) -> None:
    obj = isvc(version)
    _set(obj, where, copy.deepcopy(value))
    with pytest.raises(api.ValidationError) as e:
        api.decode(obj)
    message = str(e.value)
    assert f"spec.canary.{field}" in message and words in message, message


def test_an_analysis_needs_a_check() -> None:
    obj = isvc()
    for key in ("errorRatio", "latency", "queries"):
        del obj["spec"]["canary"]["analysis"][key]
    with pytest.raises(api.ValidationError, match=r"spec\.canary\.analysis: needs at least one check"):
        api.decode(obj)
    obj["spec"]["canary"]["analysis"]["queries"] = []
    with pytest.raises(api.ValidationError, match="needs at least one check"):
        api.decode(obj)


def _schema_node(version: str, *path: str) -> JSON:
    [entry] = [v for v in crd.crd_manifest()["spec"]["versions"] if v["name"] == version]
    node: JSON = entry["schema"]["openAPIV3Schema"]
    for name in path:
        node = node["items"] if name == "[]" else node["properties"][name]
    return node


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_the_schema_says_the_cross_field_rules_in_cel_naming_the_fields(version: str) -> None:
    canary = _schema_node(version, "spec", "canary")
    assert canary["x-kubernetes-validations"] == v1_analysis.CANARY_RULES
    analysis = canary["properties"]["analysis"]
    assert analysis["x-kubernetes-validations"] == v1_analysis.ANALYSIS_RULES
    assert analysis["properties"]["errorRatio"]["x-kubernetes-validations"] == v1_analysis.ERROR_RATIO_RULES
    assert analysis["properties"]["latency"]["x-kubernetes-validations"] == v1_analysis.LATENCY_RULES
    for interval in (
        analysis["properties"]["interval"],
        analysis["properties"]["steps"]["items"]["properties"]["interval"],
    ):
        assert "duration(self) >= duration('10s')" in interval["x-kubernetes-validations"][0]["rule"]
        assert interval["pattern"] == v1_analysis.INTERVAL_PATTERN
    queries = analysis["properties"]["queries"]
    assert (queries["x-kubernetes-list-type"], queries["x-kubernetes-list-map-keys"]) == ("map", ["name"])
    for rule in [
        *v1_analysis.CANARY_RULES,
        *v1_analysis.ANALYSIS_RULES,
        *v1_analysis.ERROR_RATIO_RULES,
        *v1_analysis.LATENCY_RULES,
    ]:
        assert rule["message"].startswith("spec.canary"), rule  # the server's error names the field
    assert {k: v.get("default") for k, v in analysis["properties"].items() if "default" in v} == {
        "interval": "1m",
        "minRequests": 20,
        "failureLimit": 1,
        "paused": False,
    }  # fmt: skip


def _nodes(schema: JSON, path: str) -> list[tuple[str, JSON]]:
    out = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        out += _nodes(sub, f"{path}.{name}")
    if "items" in schema:
        out += _nodes(schema["items"], f"{path}[]")
    return out


def test_every_analysis_field_is_described_for_kubectl_explain() -> None:
    for path, node in _nodes(_schema_node("v1", "spec", "canary", "analysis"), ".spec.canary.analysis"):
        assert node.get("description"), f"{path} has no description"


def test_the_spec_hash_ignores_pause_defaults_and_key_order_but_not_the_rest() -> None:
    base = analysis_of(isvc()).spec_hash
    assert analysis_of(gen.defaulted(isvc())).spec_hash == base
    paused = isvc()
    paused["spec"]["canary"]["analysis"]["paused"] = True
    a = analysis_of(paused)
    assert a.paused and a.spec_hash == base
    reordered = isvc()
    reordered["spec"]["canary"]["analysis"] = dict(reversed(list(ANALYSIS.items())))
    assert analysis_of(reordered).spec_hash == base
    for where, value in (
        ("analysis.steps.0.weight", 11),
        ("analysis.failureLimit", 3),
        ("model.uri", "s3://models/bert/9"),
        ("analysis.interval", "60s"),  # the same length written otherwise is another spec: a restart
    ):
        changed = isvc()
        _set(changed, where, value)
        assert analysis_of(changed).spec_hash != base, where


def test_the_spec_hash_leaves_out_what_equals_its_default() -> None:
    explicit = msgspec.convert(
        {"model": {"uri": "s3://m/b/2"}, "trafficPercent": 0, "analysis": {"steps": [{"weight": 1}],
         "interval": "".join(["1", "m"]), "minRequests": 20, "errorRatio": {"max": 0}}},
        v1.Canary,
    )  # fmt: skip
    implicit = msgspec.convert({"model": {"uri": "s3://m/b/2"}, "analysis": {"steps": [{"weight": 1}],
                                "errorRatio": {"max": 0.0}}}, v1.Canary)  # fmt: skip
    assert v1_analysis.spec_hash(explicit) == v1_analysis.spec_hash(implicit)


def test_v1alpha1_keeps_the_analysis_in_the_annotation_and_across_its_edits() -> None:
    hub = gen.defaulted(isvc())
    alpha = conversion.convert(hub, "mlops.platform/v1alpha1")
    assert alpha["spec"]["traffic"] == {"canaryVersion": "8", "canaryPercent": 0}
    assert "analysis" in alpha["metadata"]["annotations"][conversion.ANNOTATION]
    assert conversion.convert(alpha, "mlops.platform/v1") == hub
    # an edit in v1alpha1 (more replicas) keeps the analysis of the same candidate
    edited = copy.deepcopy(alpha)
    edited["spec"]["maxReplicas"] = 3
    assert conversion.to_hub(edited)["spec"]["canary"] == hub["spec"]["canary"]
    # a percent set by hand there means by hand: the analysis goes (v1 refuses both at once)
    by_hand = copy.deepcopy(alpha)
    by_hand["spec"]["traffic"]["canaryPercent"] = 20
    assert conversion.to_hub(by_hand)["spec"]["canary"] == {
        "model": {"uri": "s3://models/bert/8"},
        "trafficPercent": 20,
    }
    # another candidate: the analysis was for the old one
    other = copy.deepcopy(alpha)
    other["spec"]["traffic"]["canaryVersion"] = "9"
    assert "analysis" not in conversion.to_hub(other)["spec"]["canary"]
    traffic = api.decode(conversion.to_hub(by_hand)).traffic
    assert traffic is not None and traffic.analysis is None
