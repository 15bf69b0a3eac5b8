"""bench.scale's idle spec changes wait for the previous change's objects to go quiet."""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench import _common as common
from bench import operator_footprint, scale

from mlops_platform.runtime.clock import FakeClock


async def _run_loop() -> None:
    """Let the tasks that a fake clock's step woke run (no time passes)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_quiet_for_waits_past_the_last_event() -> None:
    clock = FakeClock()
    last = [clock.now()]
    waiting = asyncio.create_task(scale.quiet_for(lambda: last[0], 0.05, 5.0, "x", clock))
    await _run_loop()
    for _ in range(5):  # five events 20 ms apart: each moves the end of the quiet window
        clock.step(0.02)
        last[0] = clock.now()
        await _run_loop()
        assert not waiting.done()
    clock.step(0.049)  # not before the fifth event's window has passed
    await _run_loop()
    assert not waiting.done()
    clock.step(0.001)
    await _run_loop()
    assert waiting.done()
    assert await waiting == pytest.approx(last[0] + 0.05)


async def test_quiet_for_returns_at_once_when_already_quiet() -> None:
    clock = FakeClock(100.0)
    assert await scale.quiet_for(lambda: 90.0, 0.5, 5.0, "x", clock) == 100.0  # no step needed


async def test_quiet_for_gives_up_at_its_timeout() -> None:
    clock = FakeClock()
    waiting = asyncio.create_task(scale.quiet_for(clock.now, 0.5, 2.0, "x", clock))  # always a fresh event
    await _run_loop()
    assert not waiting.done()  # 0.5 s to wait fits the 2 s
    clock.step(1.6)
    await _run_loop()
    with pytest.raises(TimeoutError, match="x: still changing after 2 s"):
        await waiting  # at 1.6 s another 0.5 s would end past the 2 s


def test_the_table_shows_the_tails() -> None:
    idle = scale.Latency([10.0, 20.0, 150.0], tail_ms=[400.0, 900.0, 1800.0])
    run = scale.Run("operator", 50, 16, change_idle=idle)
    assert "| operator | 50 | 3 | 20 | 150 | 150 | 900 | 1800 |" in scale.render([run])


def _histogram(verb: str, resource: str, counts: dict[str, int], subresource: str = "") -> str:
    return "\n".join(
        f'apiserver_request_duration_seconds_bucket{{component="apiserver",group="apps",resource="{resource}",'
        f'subresource="{subresource}",verb="{verb}",version="v1",le="{le}"}} {n}'
        for le, n in counts.items()
    )


def test_server_latencies_are_read_per_write_and_diffed() -> None:
    before = _histogram("APPLY", "deployments", {"0.05": 10, "0.1": 10, "0.2": 10, "+Inf": 10})
    # 100 more applies: 60 under 50 ms, 37 under 100 ms, 2 under 200 ms, 1 slower
    after = _histogram("APPLY", "deployments", {"0.05": 70, "0.1": 107, "0.2": 109, "+Inf": 110})
    after += "\n" + _histogram("GET", "deployments", {"0.05": 5, "+Inf": 5})  # a read: not a write
    after += "\n" + _histogram("APPLY", "inferenceservices", {"0.05": 1, "+Inf": 1}, "status")
    got = scale.latency_summary(scale.server_latencies(after), scale.server_latencies(before))
    assert set(got) == {"apiserver APPLY deployments", "apiserver APPLY inferenceservices/status"}
    d = got["apiserver APPLY deployments"]
    assert (d["count"], d["over_50ms"], d["over_100ms"]) == (100, 40, 3)
    assert (d["p50_le"], d["p99_le"]) == (0.05, 0.2)
    run = scale.Run("operator", 50, 16, server_during_changes=got)
    assert "| operator | 50 | apiserver APPLY deployments | 100 | 40 | 3 | 50 / 200 |" in scale.render([run])


def _reconciled(ts: str, name: str, actions: list[str], requests_ms: dict[str, float]) -> str:
    return json.dumps(
        {"ts": ts, "msg": "reconciled", "name": name, "actions": actions, "requests_ms": requests_ms}
    )


def test_the_operators_deployment_applies_are_read_from_its_log() -> None:
    at = datetime.datetime(2026, 12, 4, 0, 0, 10, tzinfo=datetime.UTC).timestamp()
    dep = "Deployment/a-predictor"
    lines = [
        _reconciled("2026-12-04T00:00:01.000Z", "a", [f"create {dep}"], {dep: 300.0}),  # its creation
        "not json",
        _reconciled("2026-12-04T00:00:10.020Z", "b", ["status"], {"status": 9.0}),  # no Deployment
        _reconciled("2026-12-04T00:00:09.500Z", "a", [f"update {dep}", "status"], {dep: 21.5, "status": 8.0}),
        _reconciled("2026-12-04T00:00:11.000Z", "a", [f"update {dep}"], {dep: 99.0}),  # a later one
    ]
    # a's patch answered at :10 (its reconcile ended half a second before: still its change); b's
    # reconcile wrote only the status
    assert scale.deployment_applies(lines, [("a", at), ("b", at)]) == [21.5, None]


def test_the_split_table_puts_the_apply_and_the_servers_time_beside_the_rest() -> None:
    idle = scale.Latency(
        [20.0, 30.0, 150.0, 120.0, 110.0],
        apply_ms=[15.0, None, 130.0, 40.0, None],
        server_ms=[10.0, 12.0, 100.0, 30.0, None],
    )
    run = scale.Run("operator", 50, 16, change_idle=idle)
    row = scale.split_row(run)
    # 4 changes the audit log gave; of the two over 100 ms, one was mostly the API server's
    assert row == ["operator", "50", "4", "30 / 150", "40 / 130", "12 / 100", "18 / 90", "2", "1"]
    assert "| operator | 50 | 4 | 30 / 150 | 40 / 130 | 12 / 100 | 18 / 90 | 2 | 1 |" in scale.render([run])
    # an implementation that does not log its requests: the server's share only
    reference = scale.Run("reference", 50, 16, change_idle=scale.Latency([20.0, 40.0], server_ms=[8.0, 9.0]))
    want = ["reference", "50", "2", "20 / 40", "-", "8 / 9", "12 / 31", "0", "0"]
    assert scale.split_row(reference) == want
    # nothing from the audit log: no row
    assert "API server p50" not in scale.render([scale.Run("x", 50, 16, change_idle=scale.Latency([20.0]))])


def test_the_servers_time_over_each_changes_deployment_write_is_read_from_the_audit_log() -> None:
    def entry(name: str, received: str, done: str, verb: str = "patch", sub: str | None = None) -> str:
        ref = {"resource": "deployments", "namespace": "bench", "name": f"{name}-predictor"}
        if sub:
            ref["subresource"] = sub
        return json.dumps(
            {"verb": verb, "objectRef": ref, "requestReceivedTimestamp": received, "stageTimestamp": done}
        )

    at = datetime.datetime(2026, 12, 4, 1, 0, 0, tzinfo=datetime.UTC).timestamp()
    lines = [
        entry("a", "2026-12-04T00:59:58.000000Z", "2026-12-04T00:59:58.050000Z"),  # before the change
        entry("a", "2026-12-04T01:00:00.010000Z", "2026-12-04T01:00:00.015000Z", verb="update"),  # not ours
        entry("a", "2026-12-04T01:00:00.012000Z", "2026-12-04T01:00:00.013000Z", sub="status"),
        entry("a", "2026-12-04T01:00:00.030000Z", "2026-12-04T01:00:00.040000Z"),  # a later one
        entry("a", "2026-12-04T00:59:59.990000Z", "2026-12-04T01:00:00.011500Z"),  # the change's
        "not json",
    ]
    assert scale.server_applies(lines, [("a", at), ("b", at)]) == [21.5, None]


def test_pod_writes_are_counted_per_verb_and_subresource() -> None:
    def total(verb: str, resource: str, n: int, sub: str = "") -> str:
        return (
            f'apiserver_request_total{{code="200",component="apiserver",group="",resource="{resource}",'
            f'scope="resource",subresource="{sub}",verb="{verb}",version="v1"}} {n}'
        )

    before = "\n".join([total("PATCH", "pods", 10, "status"), total("POST", "pods", 5)])
    after = "\n".join(
        [
            total("PATCH", "pods", 5010, "status"),
            total("POST", "pods", 5005),
            total("POST", "pods", 5, "binding"),
            total("GET", "pods", 99),  # a read
            total("PATCH", "services", 7),  # another resource
        ]
    )
    got = scale.pod_writes(after) - scale.pod_writes(before)
    assert dict(got) == {"PATCH status": 5000, "POST": 5000, "POST binding": 5}
    run = scale.Run("operator", 50, 16, pod_writes_until_ready=dict(got))
    assert "| operator | 50 | 5000 | 5000 | 5 |" in scale.render([run])


def test_what_makes_watchers_start_over_is_counted_per_resource() -> None:
    def requests(verb: str, n: int, resource: str = "pods", sub: str = "") -> str:
        return (
            f'apiserver_request_total{{code="200",component="apiserver",group="",resource="{resource}",'
            f'scope="cluster",subresource="{sub}",verb="{verb}",version="v1"}} {n}'
        )

    before = "\n".join(
        [
            'apiserver_terminated_watchers_total{group="",resource="pods"} 1',
            'apiserver_watch_cache_initializations_total{group="",resource="pods"} 1',
            requests("LIST", 9),
        ]
    )
    after = "\n".join(
        [
            'apiserver_terminated_watchers_total{group="",resource="pods"} 4',
            'apiserver_terminated_watchers_total{group="mlops.platform",resource="inferenceservices"} 2',
            'apiserver_init_events_total{resource="pods"} 5000',
            'apiserver_watch_cache_initializations_total{group="",resource="pods"} 1',  # unchanged
            requests("LIST", 12),
            requests("WATCH", 2),
            requests("LIST", 7, resource="services"),  # not pods
            requests("GET", 3, sub="log"),  # a subresource
        ]
    )
    got = scale.watch_restarts(after) - scale.watch_restarts(before)
    assert dict(got) == {
        "closed pods": 3,
        "closed mlops.platform/inferenceservices": 2,
        "init events pods": 5000,
        "LIST pods": 3,
        "WATCH pods": 2,
    }
    run = scale.Run(
        "operator", 50, 16, pod_writes_until_ready={"POST": 50}, watch_restarts_until_ready=dict(got)
    )
    cell = (
        "closed pods 3, closed mlops.platform/inferenceservices 2, init events pods 5000, "
        "LIST pods 3, WATCH pods 2"
    )
    assert f"| operator | 50 | {cell} |" in scale.render([run])
    quiet = scale.Run("raw", 50, 256, pod_writes_until_ready={"POST": 50})
    assert "| raw | 50 | none |" in scale.render([quiet])


def test_the_clusterip_allocations_are_read_and_set_against_the_children_time() -> None:
    def post(seconds: float, n: int, resource: str = "ipaddresses", verb: str = "POST") -> str:
        labels = (
            f'component="apiserver",dry_run="",group="networking.k8s.io",resource="{resource}",'
            f'scope="resource",subresource="",verb="{verb}",version="v1"'
        )
        return f"apiserver_request_duration_seconds_sum{{{labels}}} {seconds}\n" + (
            f"apiserver_request_duration_seconds_count{{{labels}}} {n}"
        )

    def text(allocated: float, n: int, posted: float, etcd: float) -> str:
        alloc = 'kube_apiserver_clusterip_allocator_allocation_duration_seconds{cidr="10.96.0.0/16"}'
        etcd_create = 'etcd_request_duration_seconds_sum{group="networking.k8s.io",operation="create",'
        return "\n".join(
            [
                alloc.replace("seconds{", "seconds_sum{") + f" {allocated}",
                alloc.replace("seconds{", "seconds_count{") + f" {n}",
                post(posted, n),
                post(99.0, 7, verb="GET"),  # not a create
                post(99.0, 7, resource="services"),  # not an address
                etcd_create + f'resource="ipaddresses"}} {etcd}',
                etcd_create + 'resource="services"} 99.0',
            ]
        )

    after, before = scale.allocations(text(70.5, 1001, 30.0, 28.1)), scale.allocations(text(0.5, 1, 0.1, 0.1))
    got = {k: v - before[k] for k, v in after.items()}
    assert {k: round(v, 6) for k, v in got.items()} == {
        "count": 1000,
        "seconds": 70.0,
        "post_seconds": 29.9,
        "etcd_seconds": 28.0,
    }
    run = scale.Run("operator", 1000, 16, children_s=72.0, allocations_until_children=dict(got))
    row = "| operator | 1000 | 72.0 | 1000 | 70.0 | 97 % | 70.0 | 29.9 | 28.0 | 40.1 |"
    assert row in scale.render([run])
    assert "ClusterIP" not in scale.render([scale.Run("raw", 1000, 256, children_s=60.0)])


def test_each_round_starts_with_the_next_implementation() -> None:
    impls = ["operator", "raw", "reference"]
    orders = [scale.round_order(impls, rnd) for rnd in range(4)]
    assert orders == [
        ["operator", "raw", "reference"],
        ["raw", "reference", "operator"],
        ["reference", "operator", "raw"],
        ["operator", "raw", "reference"],
    ]
    assert scale.round_order([], 2) == []


def test_an_implementation_that_exited_ends_the_run_with_its_logs_tail(tmp_path: Path) -> None:
    log = tmp_path / "raw-256.log"
    log.write_text("raw writer: watching\nraw writer: a watch failed: TransportError(...)\n")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(1)"])
    impl = scale.Impl("raw", proc, log, None)
    proc.wait()
    with pytest.raises(SystemExit, match=r"(?s)raw exited with 1 during the run:\n.*a watch failed"):
        scale.running(impl)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert scale.running(scale.Impl("operator", alive, log, None))
    finally:
        alive.kill()
        alive.wait()


async def test_a_deployment_without_our_init_container_is_not_our_child() -> None:
    from mlops_platform import api
    from mlops_platform.controllers.inferenceservice import children
    from mlops_platform.controllers.inferenceservice.children import base
    from mlops_platform.runtime.transport import resources
    from mlops_platform.testing.fakes import FakeClient

    client = FakeClient()
    build = children.deployment.CHILD
    for i in range(3):
        isvc = operator_footprint.inference_service(scale.NAMESPACE, i)
        isvc["metadata"] |= {"uid": f"uid-{i}", "generation": 1}
        await client.create(api.RESOURCE, isvc)
        target = base.slots(api.decode(isvc), children.CHILDREN)[0].target
        deployment = build.build(target, base.BuildContext())
        assert deployment is not None
        pod = deployment["spec"]["template"]["spec"]
        pod["dnsPolicy"] = "ClusterFirst"  # an API server default beside ours: fine
        if i == 1:  # what the reference built before 2026-12-04
            del pod["initContainers"]
            pod["volumes"].pop()
        await client.create(resources.DEPLOYMENT, deployment)
    failure = await scale.check_same_children(client, 5000)
    assert failure == (
        "not the children our builders make: bench-0001-predictor template.spec.initContainers; "
        "bench-0001-predictor template.spec.volumes"
    )


async def test_a_deployment_that_is_not_there_fails_the_run_not_the_matrix() -> None:
    from mlops_platform.testing.fakes import FakeClient

    client = FakeClient()  # no InferenceService, no Deployment
    failure = await scale.check_same_children(client, 50)
    assert failure is not None
    assert failure.startswith("not the children our builders make: bench-0000: ")
    assert "bench-0002" in failure


async def test_a_status_other_than_the_operators_fails_the_run() -> None:
    from mlops_platform import api
    from mlops_platform.controllers.inferenceservice import status
    from mlops_platform.controllers.inferenceservice.children import base
    from mlops_platform.testing.fakes import FakeClient

    client = FakeClient()
    ctx = base.BuildContext(monitoring=False)
    for i in range(3):
        raw = operator_footprint.inference_service(scale.NAMESPACE, i)
        raw["metadata"] |= {"uid": f"uid-{i}", "generation": 1}
        isvc = api.decode(raw)
        observed = []
        for slot, want in common.desired_children(isvc, ctx):
            live = None
            if want is not None:
                live = {**want, "metadata": {**want["metadata"], "generation": 1}}
                if want["kind"] == "Deployment":
                    live["status"] = {
                        "observedGeneration": 1,
                        "replicas": 1,
                        "updatedReplicas": 1,
                        "readyReplicas": 1,
                        "availableReplicas": 1,
                    }
                elif want["kind"] == "Service":
                    live["spec"] = {**want["spec"], "clusterIP": f"10.96.0.{i + 1}"}
                await client.create(slot.child.kind.resource(), live)
            observed.append(status.Observed(slot, want, live))
        raw["status"] = status.compute(isvc, {}, observed, [], None, ctx)
        if i == 1:  # what the reference wrote before 2026-12-05: Ready alone
            raw["status"] = {
                "observedGeneration": 1,
                "replicas": 1,
                "readyReplicas": 1,
                "conditions": [c for c in raw["status"]["conditions"] if c["type"] == "Ready"],
            }
        await client.create(api.RESOURCE, raw)
    failure = await scale.check_same_status(client, 5000)
    assert failure is not None
    assert failure.startswith(
        "not the status the operator computes: bench-0001 status.replicasSummary None, ours '1/1'"
    )
    assert "bench-0001 lacks condition AutoscalerReady/True/NotRequired/fixed replica count" in failure
    assert "bench-0000" not in failure and "bench-0002" not in failure
    assert await scale.check_same_status(client, 1) is None  # bench-0000 alone: the operator's own


def test_nice_starts_each_implementation_under_nice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[list[str]] = []

    class Popen:
        def __init__(self, cmd: list[str], **_: object) -> None:
            started.append(cmd)

    monkeypatch.setattr(subprocess, "Popen", Popen)
    scale.start_impl("raw", "kc", tmp_path, 16, 256, nice=10)
    scale.start_impl("operator", "kc", tmp_path, 16, 0)
    assert started[0][:3] == ["nice", "-n", "10"] and started[0][3:5] == [sys.executable, "-m"]
    assert started[1][0] == sys.executable  # 0: not under nice
    assert scale.parse_args(["--nice", "10"]).nice == 10 and scale.parse_args([]).nice == 0
    with pytest.raises(SystemExit):
        scale.parse_args(["--nice", "20"])  # nice's range is 0-19
