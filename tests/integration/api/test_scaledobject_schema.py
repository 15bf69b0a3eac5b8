"""The KEDA ScaledObject child against KEDA's REAL CRD (``keda.sh`` v2.21.0, from its Go module) on
a real kube-apiserver: what the builder makes for ``minReplicas: 0`` is accepted with strict field
validation and stored as built (so the reconciler's compare never sees a difference it cannot
write away), and the schema's own rule (min <= max) can reject, so the test can fail.

The KEDA operator itself is not run here (it needs its metrics adapter and a Prometheus to
evaluate the trigger): waking from zero is KEDA's job, proven upstream; this proves our object is
one KEDA accepts (docs/autoscaling.md).
"""

from __future__ import annotations

import copy

import pytest

from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice.children import base, scaledobject
from mlops_platform.runtime.transport.client import ApiError, Client
from mlops_platform.testing.schemas import apply_strict


def _built(namespace: str) -> dict[str, object]:
    isvc = internal.InferenceService(
        "m", namespace, "u", 1, "seldon", "s3://b/m/1", min_replicas=0, max_replicas=4
    )
    obj = scaledobject.build(base.Target(isvc, base.predictor(isvc, keda=True)), base.BuildContext())
    assert obj is not None
    return obj


async def test_the_scaledobject_is_accepted_and_stored_as_built(admin_client: Client, namespace: str) -> None:
    obj = _built(namespace)
    answer = await apply_strict(admin_client, scaledobject.KIND, obj, "v1alpha1", dry_run=False)
    assert answer["spec"] == obj["spec"]
    assert answer["spec"]["triggers"][0]["metadata"]["activationThreshold"] == "0"


async def test_the_real_schema_rejects_a_minimum_above_the_maximum(
    admin_client: Client, namespace: str
) -> None:
    bad = copy.deepcopy(_built(namespace))
    bad["spec"]["minReplicaCount"] = 5  # type: ignore[index]
    with pytest.raises(ApiError, match="minReplicaCount must be less than or equal to maxReplicaCount") as e:
        await apply_strict(admin_client, scaledobject.KIND, bad, "v1alpha1", dry_run=True)
    assert e.value.status == 422
