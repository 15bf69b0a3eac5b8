"""The pod watch decodes only what the reconciler reads (POD_SHAPE): slimming a shaped pod gives
what slimming the whole pod gives, for every state the status reports."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from mlops_platform.controllers.inferenceservice import labels, pods_and_slices
from mlops_platform.controllers.inferenceservice.children import model_mount

Obj = dict[str, Any]


def pod(status: Obj, *, node: str | None = "kwok-cpu-1", component: str = "predictor") -> Obj:
    spec: Obj = {
        "containers": [{"name": "predictor", "image": "x" * 300, "ports": [{"containerPort": 8080}]}],
        "initContainers": [{"name": model_mount.STORAGE_INITIALIZER, "image": "y" * 300}],
        "volumes": [{"name": "model", "emptyDir": {}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "bert-predictor-7d9f-abcde",
            "namespace": "ml",
            "uid": "u1",
            "resourceVersion": "42",
            "labels": {labels.INFERENCESERVICE: "bert", labels.COMPONENT: component},
            "annotations": {labels.MODEL_URI_ANNOTATION: "s3://models/bert/2", "other": "x"},
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {"f:phase": {}}}}],
        },
        "spec": spec,
        "status": status,
    }


READY = {"type": "Ready", "status": "True"}
UNSCHEDULED = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
OOM = {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-01-01T00:00:00Z"}}
CASES = {
    "running": {"phase": "Running", "conditions": [READY],
                "containerStatuses": [{"name": "predictor", "ready": True, "started": True,
                                       "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]},
    "crash loop after OOM": {"phase": "Running", "containerStatuses": [
        {"name": "predictor", "ready": False, "restartCount": 4, "lastState": OOM,
         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}}}]},
    "download failed": {"phase": "Pending", "initContainerStatuses": [
        {"name": model_mount.STORAGE_INITIALIZER, "state": {"terminated": {
            "exitCode": 1, "reason": "Error", "message": "403 Forbidden: s3://models/bert/2"}}}]},
    "unscheduled": {"phase": "Pending", "conditions": [UNSCHEDULED]},
}  # fmt: skip


def shaped(obj: Obj) -> Obj:
    event: Obj = pods_and_slices.POD_SHAPE.event(json.dumps({"type": "MODIFIED", "object": obj}).encode())
    return event["object"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("component", [labels.PREDICTOR, labels.CANARY])
def test_slimming_a_shaped_pod_gives_what_slimming_the_whole_pod_gives(case: str, component: str) -> None:
    whole = pod(copy.deepcopy(CASES[case]), node=None if case == "unscheduled" else "n1", component=component)
    from_shape = shaped(copy.deepcopy(whole))
    assert "containers" not in from_shape["spec"] and "managedFields" not in from_shape["metadata"]
    assert pods_and_slices.slim_pod(from_shape) == pods_and_slices.slim_pod(copy.deepcopy(whole))
    assert pods_and_slices.pod_signal(pods_and_slices.slim_pod(from_shape)) == pods_and_slices.pod_signal(
        pods_and_slices.slim_pod(whole)
    )


def test_a_bound_pods_stale_unscheduled_condition_is_still_told_apart_by_its_node() -> None:
    """spec.nodeName is the one spec field the shape keeps: without it a bound pod whose
    PodScheduled=False is stale would read as waiting to be placed."""
    bound = pod({"phase": "Running", "conditions": [UNSCHEDULED]}, node="n1")
    assert pods_and_slices.pod_failure(pods_and_slices.slim_pod(shaped(bound))) is None
    assert pods_and_slices.pod_failure(
        pods_and_slices.slim_pod(shaped(pod({"conditions": [UNSCHEDULED]}, node=None)))
    )
