"""The reliability suite's audit finds each kind of damage it reports (fake client, no cluster)."""

from __future__ import annotations

from typing import Any

from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes, isvc, reliability

NS = "ns"
URI = "s3://models/m/1"


async def _isvc(
    c: fakes.FakeClient, name: str, *, ready: bool = True, behind: bool = False
) -> dict[str, Any]:
    obj = await c.create(isvc.RESOURCE, isvc.manifest(name, namespace=NS, modelUri=URI), NS)
    generation = obj["metadata"]["generation"]
    obj["status"] = {
        "observedGeneration": generation - 1 if behind else generation,
        "conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "reason": "R", "message": "m"}
        ],
    }
    return await c.replace(isvc.RESOURCE, obj, subresource="status")


async def _child(
    c: fakes.FakeClient, res: Any, name: str, owner_uid: str, *, uri: str = URI, component: str = "predictor"
) -> None:
    meta = {
        "name": name,
        "namespace": NS,
        "labels": {labels.COMPONENT: component, labels.K8S_MANAGED_BY: labels.MANAGER},
        "annotations": {labels.MODEL_URI_ANNOTATION: uri},
        "ownerReferences": [{"uid": owner_uid, "controller": True, "kind": "InferenceService", "name": "x"}],
    }
    await c.create(res, {"apiVersion": res.api_version, "kind": res.kind, "metadata": meta}, NS)


async def test_a_converged_namespace_passes_and_counts_what_it_checked() -> None:
    c = fakes.FakeClient()
    a = await _isvc(c, "a")
    await _child(c, resources.DEPLOYMENT, "a-predictor", a["metadata"]["uid"])
    await _child(c, resources.SERVICE, "a-predictor", a["metadata"]["uid"])
    found = await reliability.audit(
        c, NS, {"a": reliability.Expected(URI), "gone": reliability.Expected(deleted=True)}
    )
    assert found.ok, found.summary()
    assert (found.checked, found.children) == (2, 2)


async def test_each_kind_of_damage_is_reported() -> None:
    c = fakes.FakeClient()
    a, b = await _isvc(c, "a"), await _isvc(c, "b", behind=True)
    await _isvc(c, "d", ready=False)
    await _child(c, resources.DEPLOYMENT, "a-predictor", a["metadata"]["uid"])
    await _child(c, resources.DEPLOYMENT, "a-predictor-2", a["metadata"]["uid"])  # a second one
    await _child(c, resources.DEPLOYMENT, "b-predictor", b["metadata"]["uid"], uri="s3://models/m/old")
    await _child(c, resources.SERVICE, "z-predictor", "uid-of-nothing")
    await _isvc(c, "stranger")
    expected = {
        "a": reliability.Expected(URI),
        "b": reliability.Expected(URI),
        "d": reliability.Expected(URI),
        "lost": reliability.Expected(URI),
        "stranger": reliability.Expected(deleted=True),
    }
    found = await reliability.audit(c, NS, expected)
    assert not found.ok
    assert any("a: 2 Deployments of predictor" in f for f in found.duplicated), found.duplicated
    assert any("b: Deployment has model" in f for f in found.lost), found.lost
    assert any("d: no predictor Deployment" in f for f in found.lost), found.lost
    assert any("lost: the InferenceService is gone" in f for f in found.lost), found.lost
    assert any("Service z-predictor" in f for f in found.orphaned), found.orphaned
    assert any("b: status observed generation 0" in f for f in found.unsettled), found.unsettled
    assert any("d: not Ready (R: m)" in f for f in found.unsettled), found.unsettled
    assert any("stranger: deleted by the test but still there" in f for f in found.unsettled)


def test_a_status_going_back_a_generation_is_a_regression() -> None:
    history = reliability.StatusHistory()
    history.observed["a"].extend([1, 2, 2, 3])
    history.observed["b"].extend([1, 3, 2, 3])
    assert history.regressions() == ["b: observedGeneration 2 after 3"]


def test_the_table_has_one_line_per_row_and_escapes_pipes() -> None:
    rows = [reliability.Row("1. x", 3, "3 kills", 40, max_converge_s=2.25, notes="a|b")]
    lines = reliability.table(rows).splitlines()
    assert len(lines) == 3
    assert lines[2] == "| 1. x | 3 | 3 kills | 40 | 0 | 0 | 0 | 2.2 s | a\\|b |"
