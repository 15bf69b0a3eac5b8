"""The raw writer writes the operator's status, not a smaller one: the ceiling pays what the operator pays."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
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


async def test_an_apply_answered_5xx_is_sent_again(monkeypatch: Any) -> None:
    """The API server's 60 s timeout (504) while Services queue for their ClusterIPs at N=5000 left
    InferenceServices without a Service and the benchmark waiting for them: an apply is retried."""
    monkeypatch.setattr(asyncio, "sleep", _no_wait)
    client = fakes.FakeClient()
    client.fail("apply", "services", status=504, times=2)
    writer = RawWriter(client, NS, concurrency=8)
    raw = inference_service(NS, 0)
    raw["metadata"] |= {"uid": "u-0", "generation": 1, "resourceVersion": "1"}
    await writer.create_children(raw)
    assert client.stored(resources.SERVICE, NS, "bench-0000-predictor") is not None
    assert writer.retries == 2
    assert len(client.status_writes) == 1


async def _no_wait(_: float) -> None:
    return None


async def test_a_watch_that_fails_to_connect_is_started_again_from_the_last_version_seen() -> None:
    """An API server too busy to answer (ConnectionTimeoutError) does not end the writer: it
    watches again from where it was, without listing (and seeing every object again)."""
    from bench.raw_writer import watch_forever

    from mlops_platform.runtime.transport import client as rclient

    def obj(name: str, rv: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": NS, "resourceVersion": rv}}

    class Stop(Exception):
        """ends the test's second watch (the writer would watch on)"""

    streams = [
        [
            {"type": "ADDED", "object": obj("b", "11")},
            rclient.TransportError("GET ...: ConnectionTimeoutError"),
        ],
        [{"type": "MODIFIED", "object": obj("b", "12")}, Stop()],
    ]

    class Client:
        lists = 0
        watched_from: list[str | None] = []

        async def list(self, res: Any, namespace: str) -> dict[str, Any]:
            self.lists += 1
            return {"items": [obj("a", "9")], "metadata": {"resourceVersion": "10"}}

        async def watch(self, res: Any, namespace: str, **kw: Any) -> Any:
            self.watched_from.append(kw["resource_version"])
            for item in streams.pop(0):
                if isinstance(item, BaseException):
                    raise item
                yield item

    seen: list[tuple[str, str]] = []
    client = Client()
    with pytest.raises(Stop):
        await asyncio.wait_for(
            watch_forever(client, resources.POD, NS, lambda t, o: seen.append((t, o["metadata"]["name"]))), 10
        )
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "b")]
    assert client.lists == 1
    assert client.watched_from == ["10", "11"]
