"""EventRecorder against a real API server: aggregation into series and events.k8s.io/v1 validation."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from mlops_platform.runtime.observability.events import EventRecorder
from mlops_platform.runtime.transport.client import JSON, Client
from mlops_platform.runtime.transport.resources import CONFIG_MAP, EVENT, NAMESPACE

CONTROLLER = "mlops.platform/test-controller"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture
async def recorder(admin_client: Client) -> AsyncIterator[EventRecorder]:
    rec = EventRecorder(admin_client, CONTROLLER, "test-instance-0")
    rec.start()
    yield rec
    await rec.stop()


@pytest.fixture
async def config_map(admin_client: Client, namespace: str) -> JSON:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "subject", "namespace": namespace}}
    return await admin_client.create(CONFIG_MAP, body)


async def events_about(client: Client, namespace: str, name: str) -> list[JSON]:
    items: list[JSON] = (await client.list(EVENT, namespace))["items"]
    return [e for e in items if e["regarding"]["name"] == name]


async def test_repeats_become_one_event_with_a_series(
    recorder: EventRecorder, admin_client: Client, namespace: str, config_map: JSON
) -> None:
    recorder.event(config_map, "Normal", "Synced", "Reconcile", "configuration synced")
    await recorder.flush()  # created without a series
    [first] = await events_about(admin_client, namespace, "subject")
    assert "series" not in first
    for _ in range(19):
        recorder.event(config_map, "Normal", "Synced", "Reconcile", "configuration synced")
    await recorder.flush()  # one merge patch of the series

    [event] = await events_about(admin_client, namespace, "subject")
    assert event["metadata"]["name"] == first["metadata"]["name"]
    assert event["series"]["count"] == 20
    assert MICRO_TIME.match(event["series"]["lastObservedTime"])
    assert event["series"]["lastObservedTime"] >= event["eventTime"]
    assert recorder.writes == 2


async def test_a_burst_of_repeats_is_one_create(
    recorder: EventRecorder, admin_client: Client, namespace: str, config_map: JSON
) -> None:
    for _ in range(20):
        recorder.event(config_map, "Warning", "Failed", "Reconcile", "backend unavailable")
    await recorder.flush()
    [event] = await events_about(admin_client, namespace, "subject")
    assert event["series"]["count"] == 20
    assert recorder.writes == 1


async def test_different_reasons_make_distinct_events(
    recorder: EventRecorder, admin_client: Client, namespace: str, config_map: JSON
) -> None:
    for reason in ("Created", "Scaled", "Ready"):
        for _ in range(3):
            recorder.event(config_map, "Normal", reason, "Reconcile", f"{reason} happened")
    await recorder.flush()
    events = await events_about(admin_client, namespace, "subject")
    assert sorted(e["reason"] for e in events) == ["Created", "Ready", "Scaled"]
    assert {e["series"]["count"] for e in events} == {3}
    assert len({e["metadata"]["name"] for e in events}) == 3


async def test_the_event_is_valid_v1_on_the_server(
    recorder: EventRecorder, admin_client: Client, namespace: str, config_map: JSON
) -> None:
    recorder.event(config_map, "Warning", "Invalid", "Validate", "é" * 3000)
    await recorder.flush()
    [event] = await events_about(admin_client, namespace, "subject")
    assert event["type"] == "Warning"
    assert event["reason"] == "Invalid"
    assert event["action"] == "Validate"
    assert event["reportingController"] == CONTROLLER
    assert event["reportingInstance"] == "test-instance-0"
    assert len(event["note"].encode()) <= 1024
    assert MICRO_TIME.match(event["eventTime"])
    assert event["metadata"]["name"].startswith("subject.")
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "subject",
        "namespace": namespace,
        "uid": config_map["metadata"]["uid"],
        "resourceVersion": config_map["metadata"]["resourceVersion"],
    }
    assert recorder.dropped == 0


async def test_cluster_scoped_objects_get_events_in_default(
    recorder: EventRecorder, admin_client: Client, namespace: str
) -> None:
    ns_object = await admin_client.get(NAMESPACE, namespace)
    recorder.event(ns_object, "Normal", "Observed", "Watch", "cluster-scoped subject")
    await recorder.flush()
    [event] = await events_about(admin_client, "default", namespace)
    try:
        assert event["regarding"]["kind"] == "Namespace"
        assert "namespace" not in event["regarding"]
        assert event["reportingController"] == CONTROLLER
    finally:
        await admin_client.delete(EVENT, event["metadata"]["name"], "default")
