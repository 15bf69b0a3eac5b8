"""EventRecorder bookkeeping: aggregation keys, series coalescing, spam filter, truncation, errors."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mlops_platform.runtime.clock import FakeClock
from mlops_platform.runtime.observability.events import EventRecorder, truncate_note
from mlops_platform.runtime.transport.client import JSON, ApiError, Resource


class FakeSink:
    """Stores Events by (namespace, name); ``failures`` are raised by the next calls."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str | None, str], JSON] = {}
        self.calls: list[tuple[str, str]] = []
        self.failures: list[ApiError] = []

    async def create(self, res: Resource, obj: JSON, namespace: str | None = None) -> JSON:
        name = obj["metadata"]["name"]
        self.calls.append(("create", name))
        if self.failures:
            raise self.failures.pop(0)
        if (namespace, name) in self.objects:
            raise ApiError(409, "AlreadyExists", name)
        self.objects[(namespace, name)] = copy.deepcopy(obj)
        return obj

    async def patch(
        self, res: Resource, name: str, patch: Any, *, namespace: str | None = None, **_: Any
    ) -> JSON:
        """A merge patch whatever the ``patch_type`` (the recorder sends merge patches)."""
        self.calls.append(("patch", name))
        if self.failures:
            raise self.failures.pop(0)
        if (namespace, name) not in self.objects:
            raise ApiError(404, "NotFound", name)
        self.objects[(namespace, name)].update(copy.deepcopy(patch))
        return self.objects[(namespace, name)]

    def events(self) -> list[JSON]:
        return list(self.objects.values())


def pod(name: str = "p", uid: str = "u1", rv: str = "1", namespace: str | None = "ns") -> JSON:
    meta = {"name": name, "uid": uid, "resourceVersion": rv, "namespace": namespace}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {k: v for k, v in meta.items() if v}}


@pytest.fixture
def sink() -> FakeSink:
    return FakeSink()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def recorder(sink: FakeSink, clock: FakeClock) -> AsyncIterator[EventRecorder]:
    rec = EventRecorder(sink, "mlops.platform/test", "test-0", burst=25, refill_seconds=300.0, clock=clock)
    rec.start()
    yield rec
    await rec.stop()


async def test_repeats_in_a_burst_create_one_event_with_series(
    recorder: EventRecorder, sink: FakeSink
) -> None:
    for _ in range(20):
        recorder.event(pod(), "Normal", "Scaled", "Scale", "scaled to 3")
    await recorder.flush()
    assert [verb for verb, _ in sink.calls] == ["create"]
    [event] = sink.events()
    assert event["series"]["count"] == 20
    assert event["metadata"]["name"].startswith("p.")
    assert event["metadata"]["namespace"] == "ns"
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "1",
    }


async def test_later_repeats_patch_the_series_coalesced(recorder: EventRecorder, sink: FakeSink) -> None:
    recorder.event(pod(), "Normal", "Scaled", "Scale", "n")
    await recorder.flush()
    [first] = sink.events()
    assert "series" not in first
    for rv in range(2, 12):  # a new resourceVersion does not start a new Event
        recorder.event(pod(rv=str(rv)), "Normal", "Scaled", "Scale", "n")
    await recorder.flush()
    assert [verb for verb, _ in sink.calls] == ["create", "patch"]
    [event] = sink.events()
    assert event["series"]["count"] == 11
    assert event["eventTime"] == first["eventTime"]


@pytest.mark.parametrize(
    ("obj", "type_", "reason", "action", "note"),
    [
        (pod(), "Warning", "Scaled", "Scale", "n"),
        (pod(), "Normal", "Other", "Scale", "n"),
        (pod(), "Normal", "Scaled", "Other", "n"),
        (pod(), "Normal", "Scaled", "Scale", "other"),
        (pod(uid="u2"), "Normal", "Scaled", "Scale", "n"),
        (pod(name="q"), "Normal", "Scaled", "Scale", "n"),
    ],
)
async def test_any_key_difference_makes_a_distinct_event(
    recorder: EventRecorder, sink: FakeSink, obj: JSON, type_: Any, reason: str, action: str, note: str
) -> None:
    recorder.event(pod(), "Normal", "Scaled", "Scale", "n")
    recorder.event(obj, type_, reason, action, note)
    await recorder.flush()
    assert len(sink.events()) == 2
    assert all("series" not in e for e in sink.events())


async def test_a_repeat_after_the_window_starts_a_new_event(
    recorder: EventRecorder, sink: FakeSink, clock: FakeClock
) -> None:
    recorder.event(pod(), "Normal", "Scaled", "Scale", "n")
    clock.step(recorder.window + 1)
    recorder.event(pod(), "Normal", "Scaled", "Scale", "n")
    await recorder.flush()
    assert len(sink.events()) == 2


async def test_spam_filter_drops_new_events_beyond_the_burst_per_object(
    recorder: EventRecorder, sink: FakeSink, clock: FakeClock
) -> None:
    for i in range(30):
        recorder.event(pod(), "Normal", f"Reason{i}", "Act", "")
    recorder.event(pod(name="other"), "Normal", "Reason0", "Act", "")
    await recorder.flush()
    assert len(sink.events()) == 25 + 1
    assert recorder.dropped == 5
    clock.step(300.0)  # one token back
    recorder.event(pod(), "Normal", "Late1", "Act", "")
    recorder.event(pod(), "Normal", "Late2", "Act", "")
    await recorder.flush()
    assert len(sink.events()) == 27
    assert recorder.dropped == 6


async def test_series_updates_without_tokens_are_deferred_not_lost(sink: FakeSink, clock: FakeClock) -> None:
    rec = EventRecorder(sink, "mlops.platform/test", "test-0", burst=2, refill_seconds=60.0, clock=clock)
    rec.start()
    for expected_calls in (1, 2):  # the create and one patch use up the burst
        rec.event(pod(), "Normal", "Hot", "Loop", "")
        await rec.flush()
        assert len(sink.calls) == expected_calls
    for _ in range(5):
        rec.event(pod(), "Normal", "Hot", "Loop", "")
    await rec.flush()
    assert len(sink.calls) == 2  # deferred until a token is back
    clock.step(60.0)
    await rec.flush()
    assert sink.calls[-1][0] == "patch"
    assert sink.events()[0]["series"]["count"] == 7
    rec.event(pod(), "Normal", "Hot", "Loop", "")
    await rec.flush()
    assert len(sink.calls) == 3
    await rec.stop()  # writes the deferred update regardless of the bucket
    assert sink.events()[0]["series"]["count"] == 8


def test_truncate_note_respects_utf8_boundaries() -> None:
    assert truncate_note("short") == "short"
    cut = truncate_note("é" * 1000)  # 2000 bytes
    assert len(cut.encode()) <= 1024
    assert cut == "é" * 512


async def test_long_fields_are_truncated(recorder: EventRecorder, sink: FakeSink) -> None:
    recorder.event(pod(), "Normal", "R" * 300, "A" * 300, "x" * 5000)
    await recorder.flush()
    [event] = sink.events()
    assert len(event["note"]) == 1024
    assert len(event["reason"]) == 128
    assert len(event["action"]) == 128


async def test_cluster_scoped_objects_get_events_in_default(recorder: EventRecorder, sink: FakeSink) -> None:
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "Node:1", "uid": "n1"}}
    recorder.event(node, "Warning", "NotReady", "Check", "")
    await recorder.flush()
    [event] = sink.events()
    assert event["metadata"]["namespace"] == "default"
    assert event["metadata"]["name"].startswith("node-1.")
    assert "namespace" not in event["regarding"]


async def test_bad_input_and_write_errors_are_never_raised(
    recorder: EventRecorder, sink: FakeSink, clock: FakeClock
) -> None:
    recorder.event({"kind": "Pod"}, "Normal", "R", "A", "")  # no apiVersion/metadata
    recorder.event(pod(), "Bogus", "R", "A", "")  # type: ignore[arg-type]
    recorder.event(pod(), "Normal", "", "A", "")
    await recorder.flush()
    assert sink.calls == []
    sink.failures = [ApiError(422, "Invalid", "bad"), ApiError(500, "InternalError", "later")]
    recorder.event(pod(), "Normal", "Invalid", "A", "")  # 422: dropped, not retried
    recorder.event(pod(), "Normal", "Transient", "A", "")  # 500: retried after a backoff
    await recorder.flush()
    assert len(sink.calls) == 2
    assert sink.events() == []
    clock.step(30.0)
    await recorder.flush()
    assert [e["reason"] for e in sink.events()] == ["Transient"]
    assert len(sink.calls) == 3
    recorder.event(pod(), "Normal", "Invalid", "A", "")  # a rejected event is not retried on repeats
    await recorder.flush()
    assert len(sink.calls) == 3


async def test_a_deleted_event_is_recreated_with_its_series(recorder: EventRecorder, sink: FakeSink) -> None:
    recorder.event(pod(), "Normal", "R", "A", "")
    await recorder.flush()
    sink.objects.clear()  # e.g. expired by the server's event TTL
    recorder.event(pod(), "Normal", "R", "A", "")
    await recorder.flush()
    assert [verb for verb, _ in sink.calls] == ["create", "patch", "create"]
    assert sink.events()[0]["series"]["count"] == 2


async def test_transient_write_failures_are_retried_after_1_2_4_seconds(
    recorder: EventRecorder, sink: FakeSink, clock: FakeClock
) -> None:
    sink.failures = [ApiError(503, "ServiceUnavailable", "busy")] * 3
    recorder.event(pod(), "Normal", "Retried", "A", "")
    await recorder.flush()
    for calls, wait in ((1, 1.0), (2, 2.0), (3, 4.0)):
        clock.step(wait - 0.001)
        await recorder.flush()
        assert len(sink.calls) == calls  # not before the backoff has passed
        clock.step(0.001)
        await recorder.flush()
    assert len(sink.calls) == 4
    assert [e["reason"] for e in sink.events()] == ["Retried"]


async def test_events_carry_the_id_of_the_reconcile_that_recorded_them(
    sink: FakeSink, clock: FakeClock
) -> None:
    from mlops_platform.runtime.observability import logs

    key = "example.com/reconcile-id"
    rec = EventRecorder(sink, "c", "i", clock=clock, correlation_annotation=key)
    rec.start()
    try:
        with logs.log_context(reconcile_id="aaa111"):
            rec.event(pod(), "Normal", "Created", "Create", "made it")
        rec.event(pod(name="other"), "Normal", "Created", "Create", "no reconcile bound")
        await rec.flush()
        by_name = {e["regarding"]["name"]: e for e in sink.events()}
        assert by_name["p"]["metadata"]["annotations"] == {key: "aaa111"}
        assert "annotations" not in by_name["other"]["metadata"]
        with logs.log_context(reconcile_id="bbb222"):  # a repeat: the series names the latest
            rec.event(pod(), "Normal", "Created", "Create", "made it")
        await rec.flush()
        assert sink.calls[-1][0] == "patch"
        by_name = {e["regarding"]["name"]: e for e in sink.events()}
        assert by_name["p"]["metadata"]["annotations"] == {key: "bbb222"}
    finally:
        await rec.stop()
    plain = EventRecorder(FakeSink(), "c", "i", clock=clock)
    with logs.log_context(reconcile_id="ccc"):
        plain.event(pod(), "Normal", "Created", "Create", "x")
    assert not plain._entries or all(not e.correlation for e in plain._entries.values())


async def test_a_refusal_and_its_end_are_told_once_per_namespace(
    recorder: EventRecorder, sink: FakeSink
) -> None:
    """The write comes after the owner's reconcile: the owner learns of a 403 (and of its end) from
    the listener, once when it starts and once when it ends, not at every refused Event."""
    heard: list[tuple[str, bool]] = []
    recorder.add_denial_listener(lambda ns, denied: heard.append((ns, denied)))
    sink.failures = [ApiError(403, "Forbidden", "events is forbidden")] * 2
    recorder.event(pod("a"), "Normal", "One", "A", "")
    recorder.event(pod("b"), "Normal", "Two", "A", "")
    await recorder.flush()
    assert heard == [("ns", True)] and "ns" in recorder.denied
    recorder.event(pod("c"), "Normal", "Three", "A", "")
    await recorder.flush()
    assert heard == [("ns", True), ("ns", False)] and "ns" not in recorder.denied
