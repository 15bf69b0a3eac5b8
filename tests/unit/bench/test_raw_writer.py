"""The raw writer writes the operator's status, not a smaller one: the ceiling pays what the operator pays."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from bench.operator_footprint import inference_service
from bench.raw_writer import RawWriter

from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes

NS = "bench"


def _types(status: dict[str, Any]) -> list[str]:
    return [c["type"] for c in status["conditions"]]


async def test_both_status_writes_carry_every_condition_the_operator_computes() -> None:
    client = fakes.FakeClient()
    writer = RawWriter(client, NS, concurrency=8)
    raw = inference_service(NS, 2)  # torchserve, maxReplicas 2: an HPA too
    raw["metadata"] |= {"uid": "u-1", "generation": 1, "resourceVersion": "1"}
    raw["apiVersion"] = "mlops.platform/v1"
    await writer.create_children(raw)
    first = client.status_writes[-1].body
    assert first is not None
    assert [c.resource for c in client.writes] == [
        "deployments",
        "services",
        "horizontalpodautoscalers",
        "events",
    ]
    assert _types(first["status"]) == [
        "Ready",
        "Reconciled",
        "DeploymentAvailable",
        "ServiceReady",
        "AutoscalerReady",
        "NetworkPolicyReady",
        "MonitoringReady",
    ]
    assert first["status"]["conditions"][0]["status"] == "False"
    assert "lastReconcileTime" in first["status"]

    dep = copy.deepcopy(client.stored(resources.DEPLOYMENT, NS, "bench-0002-predictor"))
    assert dep is not None
    dep["status"] = {
        "observedGeneration": 1,
        "replicas": 1,
        "updatedReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}],
    }
    writer.on_deployment("MODIFIED", dep)
    await asyncio.gather(*writer.tasks)
    second = client.status_writes[-1].body
    assert second is not None and len(client.status_writes) == 2
    ready = second["status"]["conditions"][0]
    assert (ready["type"], ready["status"]) == ("Ready", "True")
    assert second["status"]["readyReplicas"] == 1
    assert writer.failures == 0
