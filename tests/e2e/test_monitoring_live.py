"""Monitoring that really runs (issue #41): the Prometheus Operator turns the operator's
ServiceMonitor and PrometheusRule into Prometheus' configuration, Prometheus scrapes the real
MLServer pods and kube-state-metrics, and the alerts fire on real failures
(:mod:`mlops_platform.devcluster.monitoring`, on the real node).

Every read of Prometheus goes through the API server's service proxy (:mod:`mlops_platform.promapi`).
Each alert's ``for`` is :data:`FOR` here (the default 5m would make the module take half an hour):
an alert fires once its condition has held that long, at the next rule evaluation.

- ``iris`` (2 replicas): both pods are targets that are up; requests its model cannot answer fire
  ``InferenceServiceHighErrorRatio``, which resolves once answered requests outweigh them; its
  ``latencySeconds`` is :data:`LATENCY_THRESHOLD`, under the real server's answer time, so its
  answers are slow for it and ``InferenceServiceHighLatency`` fires;
- ``lost`` (its model's URI names nothing): no replica ever becomes available and
  ``InferenceServiceNoReadyReplica`` fires through kube-state-metrics;
- ``squeezed`` (2 replicas in a namespace whose ResourceQuota admits one pod): one replica is
  available and ``InferenceServiceBelowMinReplicas`` fires through kube-state-metrics;
- ``elastic`` (KEDA, :mod:`mlops_platform.devcluster.keda`): switched to ``minReplicas: 0`` under
  load, its ScaledObject scales the real MLServer up to ``maxReplicas`` from its own request rate as
  Prometheus scrapes it, and back to zero once idle past its cooldown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mlops_platform import api, infer, promapi, why
from mlops_platform.controllers.inferenceservice import alert_queries, alert_settings, alerts
from mlops_platform.controllers.inferenceservice.children import base, scaledobject
from mlops_platform.devcluster import demo, keda
from mlops_platform.devcluster import monitoring as stack
from mlops_platform.devcluster.modelstore import install as modelstore
from mlops_platform.runtime import objects
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import activation, probes, serving, wait
from mlops_platform.testing.plugin import temporary_namespace

FOR = "30s"
#: requests per second of the tests' loads: what the metrics need (KEDA's 2 per replica wants both
#: replicas), at a fraction of the CPU of back-to-back requests through the API server
PACE = 10.0
#: iris' error-ratio threshold: only failing requests fire it, and it resolves as soon as answered
#: ones outnumber the failures in the rate window (at the default 5 %, 19 times as many)
ERROR_RATIO = 0.5
LATENCY_THRESHOLD = 0.001
#: a request the iris model cannot answer: 3 features, it was trained on 4
BAD_REQUEST = {"inputs": [{"name": "input-0", "shape": [1, 3], "datatype": "FP64", "data": [1.0, 2.0, 3.0]}]}
#: the longest an alert may take to fire once its condition holds: its ``for``, one rule evaluation,
#: and the scrapes that make a rate (the local cluster scrapes every 10s) with slack for a loaded machine
FIRE_WITHIN = 240.0
SERVER = promapi.DEFAULT


@pytest.fixture(scope="module")
async def serving_settings(
    local_cluster_name: str, admin_client: rclient.Client
) -> AsyncIterator[base.BuildContext]:
    """KEDA, the monitoring stack and the activator (the operator's image) installed; the local
    cluster's settings with ``--activator`` (``ns`` and the operator: tests/e2e/conftest). The
    activator is removed after the module."""
    await asyncio.to_thread(keda.install, local_cluster_name)
    async with activation.installed(admin_client, local_cluster_name) as activator:
        yield dataclasses.replace(demo.local_settings(), activator=activator)


def _fast(isvc: dict[str, Any], **alert_overrides: Any) -> dict[str, Any]:
    isvc["spec"]["monitoring"] = {"alerts": {"for": FOR, "belowMinFor": FOR, **alert_overrides}}
    return isvc


class Services:
    def __init__(self, ns: str, squeezed_ns: str) -> None:
        self.ns = ns
        self.squeezed_ns = squeezed_ns


@pytest.fixture(scope="module")
async def services(
    admin_client: rclient.Client, serving_operator: rmanager.Manager
) -> AsyncIterator[Services]:
    """The alerts' three InferenceServices, created at once (their alerts' clocks start together),
    and the KEDA tests' two (``elastic`` Ready and ``sleepy`` at zero by the time their tests run,
    instead of each test waiting for its own start)."""
    async with (
        temporary_namespace(admin_client, "monitoring-live") as ns,
        temporary_namespace(admin_client, "monitoring-squeezed") as squeezed_ns,
    ):
        for n in (ns, squeezed_ns):
            await modelstore.grant(admin_client, n)
        quota = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "one-pod"},
            "spec": {"hard": {"pods": "1"}},
        }
        await admin_client.create(await admin_client.resource_for("v1", "ResourceQuota"), quota, squeezed_ns)
        iris = _fast(
            serving.iris("iris", replicas=2), latencySeconds=LATENCY_THRESHOLD, errorRatio=ERROR_RATIO
        )
        await admin_client.create(api.RESOURCE, iris, ns)
        await admin_client.create(api.RESOURCE, _fast(serving.iris("lost", "s3://models/nothing-here/1")), ns)
        await admin_client.create(api.RESOURCE, _fast(serving.iris("squeezed", replicas=2)), squeezed_ns)
        # one fixed replica first (no HPA of ours, which would scale it on CPU): the second is KEDA's
        await admin_client.create(api.RESOURCE, serving.iris("elastic", replicas=1), ns)
        await admin_client.create(api.RESOURCE, _sleepy(), ns)
        yield Services(ns, squeezed_ns)


async def _alert(c: rclient.Client, ns: str, name: str, alert: str) -> dict[str, Any] | None:
    """The rule ``alert`` of the InferenceService's group as Prometheus evaluates it (None: not loaded)."""
    rules = await promapi.alert_rules(c, SERVER, alerts.group_name(ns, name))
    return next((r for r in rules or () if r.get("name") == alert), None)


async def _until_state(
    c: rclient.Client, ns: str, name: str, alert: str, state: str, timeout: float
) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        rule = await _alert(c, ns, name, alert)
        return rule if rule is not None and rule.get("state") == state else None

    return await wait.until(reached, timeout=timeout, interval=1.0, what=f"{alert} of {ns}/{name} {state}")


def _active_at(rule: dict[str, Any]) -> float:
    """When the rule's (first) alert became pending: its condition held from then on."""
    (first, *_) = rule["alerts"]
    # Prometheus writes nanoseconds; Python reads up to microseconds
    stamp = re.sub(r"(\.\d{6})\d+", r"\1", first["activeAt"])
    return datetime.datetime.fromisoformat(stamp).timestamp()


async def test_every_predictor_pod_is_an_up_target_and_the_rule_group_is_loaded(
    admin_client: rclient.Client, services: Services
) -> None:
    await serving.ready(admin_client, services.ns, "iris")
    pods = await admin_client.list(
        resources.POD, services.ns, label_selector="mlops.platform/inferenceservice=iris"
    )
    names = sorted(p["metadata"]["name"] for p in pods["items"])
    assert len(names) == 2, names
    pool = promapi.service_monitor_pool(services.ns, "iris")

    async def both_up() -> list[dict[str, Any]] | None:
        found = await promapi.targets(admin_client, SERVER, pool)
        up = sorted(t["labels"].get("pod", "") for t in found if t["health"] == "up")
        return found if up == names else None

    found = await wait.until(both_up, timeout=120, interval=1.0, what=f"{pool}: {names} up")
    for t in found:  # the labels the alerts select on, from the pods
        assert t["labels"]["mlops_platform_inferenceservice"] == "iris", t["labels"]
        assert t["labels"]["mlops_platform_component"] == "predictor", t["labels"]

    async def evaluated() -> list[dict[str, Any]] | None:  # loaded, and each rule evaluated once
        rules = await promapi.alert_rules(admin_client, SERVER, alerts.group_name(services.ns, "iris"))
        return rules if rules and all(r["health"] != "unknown" for r in rules) else None

    rules = await wait.until(evaluated, timeout=120, interval=1.0, what="the rule group loaded and evaluated")
    assert sorted(r["name"] for r in rules) == sorted(
        [
            alert_settings.NO_READY_REPLICA,
            alert_settings.BELOW_MIN_REPLICAS,
            alert_settings.HIGH_ERROR_RATIO,
            alert_settings.HIGH_LATENCY,
        ]
    )
    assert all(r["health"] == "ok" for r in rules), rules


async def test_failing_requests_fire_the_error_ratio_alert_and_it_resolves_once_answers_outweigh_them(
    admin_client: rclient.Client, services: Services, kube_cluster: Path
) -> None:
    ns = services.ns
    await serving.ready(admin_client, ns, "iris")
    started = time.time()
    failed = 0

    async def failing() -> None:
        nonlocal failed
        while True:
            with contextlib.suppress(infer.InferError):
                await infer.infer(admin_client, "iris", ns, BAD_REQUEST)
                raise AssertionError("the model answered a request of 3 features")
            failed += 1
            await asyncio.sleep(0.5)  # a steady trickle of failures, not a flood

    task = asyncio.create_task(failing())
    try:
        rule = await _until_state(
            admin_client, ns, "iris", alert_settings.HIGH_ERROR_RATIO, "firing", FIRE_WITHIN
        )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    fired = time.time()
    held = fired - _active_at(rule)
    print(
        f"\nHighErrorRatio: firing {fired - started:.0f}s after the first failed request "
        f"({failed} failed), {held:.0f}s after its condition began to hold (for {FOR}, "
        f"evaluation every {stack.EVALUATION_INTERVAL})"
    )
    within = alert_settings.parse_duration(FOR) + alert_settings.parse_duration(stack.EVALUATION_INTERVAL)
    assert held <= within + 5, held
    # one command answers "is it serving, and is it healthy": why shows the firing alert and the targets
    report = await why.collect(str(kube_cluster), None, ns, "iris", demo.local_settings())
    assert report.serving, report.summary
    assert report.health is not None and report.health.loaded, report.health
    assert alert_settings.HIGH_ERROR_RATIO in [a.name for a in report.health.firing], report.health.alerts
    assert [t.health for t in report.health.targets] == ["up", "up"], report.health.targets
    text = why.render_text(report)
    assert re.search(rf"{alert_settings.HIGH_ERROR_RATIO}\s+firing", text) and "targets: 2 of 2 up" in text, (
        text
    )
    # answered requests outweigh the failures in the rate window: the ratio falls under the threshold
    stopped = time.time()
    async with serving.load(admin_client, ns, "iris", rate=PACE) as traffic:
        await _until_state(admin_client, ns, "iris", alert_settings.HIGH_ERROR_RATIO, "inactive", FIRE_WITHIN)
    print(f"HighErrorRatio: resolved {time.time() - stopped:.0f}s after the failures stopped")
    assert traffic.errors == [], traffic.summary()


async def test_answers_slower_than_the_threshold_fire_the_latency_alert(
    admin_client: rclient.Client, services: Services
) -> None:
    ns = services.ns
    await serving.ready(admin_client, ns, "iris")
    async with serving.load(admin_client, ns, "iris", rate=PACE) as traffic:
        rule = await _until_state(
            admin_client, ns, "iris", alert_settings.HIGH_LATENCY, "firing", FIRE_WITHIN
        )
    assert traffic.errors == [], traffic.summary()
    (alert, *_) = rule["alerts"]
    assert float(alert["value"]) > LATENCY_THRESHOLD, alert
    print(f"\nHighLatency: firing at {float(alert['value']) * 1000:.1f} ms > {LATENCY_THRESHOLD * 1000:g} ms")


async def test_a_deployment_without_its_replicas_fires_the_replica_alerts_through_kube_state_metrics(
    admin_client: rclient.Client, services: Services
) -> None:
    lost = await _until_state(
        admin_client, services.ns, "lost", alert_settings.NO_READY_REPLICA, "firing", FIRE_WITHIN
    )
    assert lost["alerts"][0]["labels"]["deployment"] == "lost-predictor", lost
    squeezed = await _until_state(
        admin_client,
        services.squeezed_ns,
        "squeezed",
        alert_settings.BELOW_MIN_REPLICAS,
        "firing",
        FIRE_WITHIN,
    )
    assert float(squeezed["alerts"][0]["value"]) == 1.0, squeezed  # one replica of two
    for name, rule in (("lost", lost), ("squeezed", squeezed)):
        print(f"\n{rule['name']} of {name}: pending since {rule['alerts'][0]['activeAt']}")


ELASTIC_COOLDOWN = 30
#: requests per second per replica: the sequential load (tens per second) wants both replicas
ELASTIC_RATE = 2


async def _replicas(c: rclient.Client, ns: str, name: str) -> int:
    live = await c.get(resources.DEPLOYMENT, f"{name}-predictor", ns)
    return int(live["spec"].get("replicas", 1))


async def test_keda_scales_the_real_server_up_under_load_and_to_zero_once_idle(
    admin_client: rclient.Client, services: Services
) -> None:
    ns = services.ns
    await serving.ready(admin_client, ns, "elastic")
    scale_to_zero = {"requestsPerReplica": ELASTIC_RATE, "cooldownSeconds": ELASTIC_COOLDOWN}
    rate = alert_queries.SERVERS["seldon"].requests(alerts.request_query(ns, "elastic"))

    async def seen() -> bool:  # what KEDA's trigger will read: Prometheus has a rate for it
        return any(float(s["value"][1]) > 0 for s in await promapi.query(admin_client, SERVER, rate))

    async with serving.load(admin_client, ns, "elastic", rate=PACE) as traffic:
        await wait.until(seen, timeout=180, interval=1.0, what="Prometheus has elastic's request rate")
        switched = time.monotonic()
        autoscaling = {"minReplicas": 0, "maxReplicas": 2, "scaleToZero": scale_to_zero}
        await admin_client.patch(
            api.RESOURCE, "elastic", {"spec": {"predictor": {"autoscaling": autoscaling}}}, namespace=ns
        )
        await wait.until(
            lambda: admin_client.get(scaledobject.KIND.resource(), "elastic-predictor", ns),
            timeout=60,
            what="the ScaledObject",
        )
        await wait.until(
            lambda: _scaled_to(admin_client, ns, "elastic", 2),
            timeout=240,
            interval=1.0,
            what="KEDA: 2 replicas",
        )
        up = time.monotonic() - switched

        # KEDA's own poll marks it active (its HPA may have scaled first)
        async def active() -> bool:
            so = await admin_client.get(scaledobject.KIND.resource(), "elastic-predictor", ns)
            return objects.condition_is(so, "Active")

        await wait.until(active, timeout=60, what="the ScaledObject Active")
        hpa = await admin_client.get(resources.HPA, "keda-hpa-elastic-predictor", ns)  # KEDA's own
        assert hpa["spec"]["maxReplicas"] == 2, hpa["spec"]
    assert traffic.errors == [], traffic.summary()
    idle = time.monotonic()
    await wait.until(
        lambda: _scaled_to(admin_client, ns, "elastic", 0),
        timeout=360,
        interval=1.0,
        what="KEDA: zero replicas",
    )
    down = time.monotonic() - idle
    print(f"\nKEDA: 2 replicas {up:.0f}s after the switch under load, zero {down:.0f}s after it stopped")
    obj = await wait.for_condition(
        admin_client, api.RESOURCE, ns, "elastic", "Ready", "False", "ScaledToZero", timeout=60
    )
    assert "KEDA ScaledObject elastic-predictor" in probes.condition(obj, "Ready")["message"]


async def _scaled_to(c: rclient.Client, ns: str, name: str, want: int) -> bool:
    return await _replicas(c, ns, name) == want


WAKES = 2


def _sleepy() -> dict[str, Any]:
    sleepy = serving.iris("sleepy")
    sleepy["spec"]["predictor"]["autoscaling"] = {
        "minReplicas": 0, "maxReplicas": 1, "scaleToZero": {"cooldownSeconds": ELASTIC_COOLDOWN},
    }  # fmt: skip
    return sleepy


async def test_a_request_at_zero_is_held_by_the_activator_and_answered_then_it_steps_out(
    admin_client: rclient.Client, services: Services
) -> None:
    ns = services.ns
    service = "sleepy-predictor"
    wakes = []
    for _ in range(WAKES):
        obj = await wait.for_condition(
            admin_client, api.RESOURCE, ns, "sleepy", "Ready", "False", "ScaledToZero", timeout=300
        )
        assert f"held by the activator {activation.SERVICE}" in probes.condition(obj, "Ready")["message"]
        await wait.until(
            lambda: activation.parked(admin_client, ns, service),
            timeout=60,
            what="parked behind the activator",
        )
        started = time.monotonic()
        answer = await infer.infer(admin_client, "sleepy", ns, serving.v2(serving.QUICKSTART), timeout=300)
        wakes.append(time.monotonic() - started)
        assert serving.answer(answer) == [1, 1]
        # the activator steps out once a replica is available: warm requests never reach it
        await wait.until(
            lambda: activation.unparked(admin_client, ns, service),
            timeout=60,
            what="the activator out of the path",
        )
        forwarded = (await activation.counts(admin_client)).get("forwarded", 0)
        async with serving.load(admin_client, ns, "sleepy") as traffic:
            await traffic.more(30)
        assert traffic.errors == [], traffic.summary()
        assert (await activation.counts(admin_client)).get("forwarded", 0) == forwarded
        # idle past the cooldown: back to zero, and parked again (the loop's first wait)
    print(f"\nwake from zero through the activator: {', '.join(f'{w:.1f}s' for w in wakes)}")
