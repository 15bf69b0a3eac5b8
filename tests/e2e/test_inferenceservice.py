"""InferenceService end to end: the operator (in this process) against the real control plane."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import uuid
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest

from mlops_platform.controllers.inferenceservice import analysis_measure, controller, labels
from mlops_platform.controllers.inferenceservice.children import monitoring, scaledobject
from mlops_platform.deploy import rbac as deploy_rbac
from mlops_platform.runtime import rbac
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import identity, isvc, plugin, probes, requests, stages, wait, webhook
from mlops_platform.testing import operator as testing_operator
from mlops_platform.webhooks import serve

ISVC = isvc.RESOURCE  # v1alpha1 objects: every request goes through the conversion webhook
PROMETHEUS_RULE = monitoring.PROMETHEUS_RULE.resource()
SERVICE_MONITOR = monitoring.SERVICE_MONITOR.resource()
SCALED_OBJECT = scaledobject.KIND.resource()


@dataclasses.dataclass
class Operator:
    manager: rmanager.Manager
    watch: str | None  # the one watched namespace in namespaced mode


@pytest.fixture(scope="module", params=["cluster", "namespaced"])
async def operator_env(
    request: pytest.FixtureRequest, kube_cluster: Path, admin_client: rclient.Client
) -> AsyncIterator[Operator]:
    """The operator, in this process, with leader election, authenticated as its ServiceAccount bound
    ONLY to the roles generated from the code's permission declarations: the real RBAC authorizer
    checks every call. Cluster mode: ClusterRole, all namespaces. Namespaced mode: Roles in one
    namespace, which it watches (and holds its Lease in); the whole suite runs in it.

    Its teardown, after every test of the module with this operator (whatever their order), checks
    the requests the operator made: see :func:`_check_requests`. A violation is an error at teardown
    (which fails the run)."""
    await webhook.install_crd(admin_client)
    suffix = uuid.uuid4().hex[:6]
    op_ns = f"mlops-e2e-{request.param[:2]}-{suffix}"
    await admin_client.create(
        resources.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": op_ns}}
    )
    watch = op_ns if request.param == "namespaced" else None
    rbac_objs = deploy_rbac.objects(
        namespace=op_ns, watch_namespaces=[watch] if watch else None, name=f"mlops-e2e-{suffix}"
    )
    await identity.apply_objects(admin_client, rbac_objs)
    token = await identity.token_for(admin_client, op_ns, deploy_rbac.NAME)
    c = identity.client_with_token(kube_cluster, token)
    mgr = rmanager.Manager(
        c, testing_operator.options(watch, lease="mlops-platform-e2e", lease_namespace=op_ns)
    )
    controller.setup(mgr, workers=4)
    task = asyncio.create_task(mgr.run())
    await wait.until(lambda: mgr.is_ready(), timeout=60, what="operator ready (synced and leading)")
    # and it has listed the optional kinds the cluster serves (on a fresh cluster a just-established
    # CRD is served a moment later): the first test's one Event lists every child
    await wait.until(mgr.optional_kinds.all_synced, timeout=60, what="optional kinds listed")
    yield Operator(mgr, watch)
    try:
        mgr.stop()
        await asyncio.wait_for(task, 60)
    finally:
        await c.close()
        await identity.delete_objects(
            admin_client, [o for o in rbac_objs if "namespace" not in o["metadata"]]
        )
        await admin_client.delete(resources.NAMESPACE, op_ns)
    _check_requests(c, every_test_ran=_every_test_ran(request))


def _every_test_ran(request: pytest.FixtureRequest) -> bool:
    """Whether every test of this module was selected with this operator (not a ``-k`` subset)."""
    module = request.module
    tests = {name for name in vars(module) if name.startswith("test_")}
    selected = {
        item.originalname
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.module is module
        and item.callspec.params.get("operator_env") == request.param
    }
    return selected == tests


def _check_requests(c: rclient.Client, *, every_test_ran: bool) -> None:
    """Every request the operator made (as its ServiceAccount) was covered by the declared (and
    generated) rules and none was denied; when the whole module ran, every declared rule was used."""
    rules = deploy_rbac.declared_rules()
    made = sorted({(verb, res) for (verb, res, _code) in c.requests})
    assert made, "the operator made no request?"
    uncovered = [(verb, res) for verb, res in made if not rbac.covers(rules, verb, res)]
    assert uncovered == [], f"requests not covered by the declared RBAC: {uncovered}"
    assert not any(k[2] == 401 for k in c.requests)
    # 403s other than RBAC ("namespace is being terminated" while a test namespace goes away) are fine
    denied = [m for m in c.forbidden if " cannot " in m and " resource " in m]
    assert denied == [], f"requests denied under the generated RBAC: {denied[:3]}"
    if every_test_ran:  # every declared rule was exercised by the suite (no dead permission)
        used = {res for _, res in made}
        # the conversion webhook's rules (its Secret, the CRD's caBundle) are the webhook's, which
        # this in-process operator does not run: tests/e2e/test_webhook_rbac.py uses every one
        webhook_only = set(serve.RBAC)
        # the canary analysis' Prometheus rule: a measurement needs a live Prometheus and a real
        # route, which this kwok suite has not; tests/e2e/test_progressive_delivery.py runs the
        # operator under the generated RBAC on the real node, and its analyses need that rule
        analysis_only = set(analysis_measure.RBAC)
        unused = [r.name for r in rules if r.name not in used and r not in webhook_only | analysis_only]
        assert unused == [], f"declared but never used in the e2e suite: {unused}"


@pytest.fixture
def operator(operator_env: Operator) -> rmanager.Manager:
    return operator_env.manager


@pytest.fixture
async def namespace(
    operator_env: Operator, admin_client: rclient.Client, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """Cluster mode: a fresh namespace per test. Namespaced mode: the operator's watched namespace
    (the tests use distinct object names)."""
    if operator_env.watch is not None:
        yield operator_env.watch
        return
    async with plugin.temporary_namespace(admin_client, request.node.name) as ns:
        yield ns


_isvc = functools.partial(
    isvc.manifest, modelUri="s3://models/m/1", framework="torchserve", minReplicas=1, maxReplicas=1
)


async def _get(c: rclient.Client, ns: str, name: str) -> dict[str, Any]:
    return await c.get(ISVC, name, ns)


async def _ready_with(c: rclient.Client, ns: str, name: str, **status: Any) -> bool:
    """Whether ``name`` is Ready with these ``status`` fields."""
    obj = await _get(c, ns, name)
    st = obj.get("status") or {}
    return probes.condition(obj, "Ready").get("status") == "True" and all(
        st.get(k) == v for k, v in status.items()
    )


async def _create_ready(c: rclient.Client, ns: str, name: str, **spec: Any) -> dict[str, Any]:
    """Create ``name`` (this module's defaults and ``spec``) and wait until it is Ready."""
    await c.create(ISVC, _isvc(name, **spec), ns)
    return await _wait_cond(c, ns, name, "Ready", "True")


async def _wait_cond(
    c: rclient.Client, ns: str, name: str, type_: str, status: str, reason: str | None = None
) -> dict[str, Any]:
    return await wait.for_condition(c, ISVC, ns, name, type_, status, reason, timeout=90)


async def test_create_becomes_ready_with_url_and_children(
    admin_client: rclient.Client, namespace: str, operator: rmanager.Manager
) -> None:
    await _create_ready(admin_client, namespace, "web", minReplicas=2, maxReplicas=2, port=8085)

    async def all_ready() -> dict[str, Any] | None:
        obj = await _get(admin_client, namespace, "web")
        return obj if (obj.get("status") or {}).get("readyReplicas") == 2 else None

    obj = await wait.until(all_ready, timeout=60, what="2/2 replicas ready")
    st = obj["status"]
    assert st["url"] == f"http://web-predictor.{namespace}.svc.cluster.local:8085"
    assert st["readyReplicas"] == 2
    assert st["replicasSummary"] == "2/2"
    assert st["activeVersion"] == "s3://models/m/1"
    assert probes.condition(obj, "Reconciled")["status"] == "True"
    for t in ("DeploymentAvailable", "ServiceReady", "AutoscalerReady"):
        assert probes.condition(obj, t)["status"] == "True", (t, probes.condition(obj, t))
    dep = await admin_client.get(resources.DEPLOYMENT, "web-predictor", namespace)
    owner = dep["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "InferenceService"
    assert owner["controller"] is True
    assert await probes.exists(admin_client, resources.SERVICE, namespace, "web-predictor")
    assert not await probes.exists(admin_client, resources.HPA, namespace, "web-predictor")  # min == max
    # the service's pods, whatever else shares the namespace (namespaced mode: the whole suite)
    of_web = f"{labels.INFERENCESERVICE}=web"
    pods = (await admin_client.list(resources.POD, namespace, label_selector=of_web))["items"]
    assert len(pods) == 2

    async def created_events() -> list[dict[str, Any]] | None:
        items = (await admin_client.list(resources.EVENT, namespace))["items"]
        found = [e for e in items if e["regarding"]["name"] == "web" and e["reason"] == "Created"]
        return found or None

    found = await wait.until(created_events, timeout=30, what="the Created Event on the InferenceService")
    # one Event for the reconcile that created the children, listing them in slot order
    assert [e.get("note", "") for e in found] == [
        "created Deployment/web-predictor, Service/web-predictor, PrometheusRule/web, ServiceMonitor/web"
    ]
    # and it names that reconcile: the reconcile_id of its JSON log line
    reconcile_id = found[0]["metadata"].get("annotations", {}).get(labels.RECONCILE_ID_ANNOTATION, "")
    assert len(reconcile_id) == 12 and int(reconcile_id, 16) >= 0
    assert all(p["status"]["phase"] == "Running" for p in pods)


async def test_crashloop_makes_ready_false_with_the_reason(
    admin_client: rclient.Client, namespace: str, operator: rmanager.Manager, kubectl: plugin.Kubectl
) -> None:
    stage = stages.crashloop_stage(
        f"crash-{namespace}", namespace, "mlops.platform/inferenceservice", "crashy"
    )
    stage_res = await admin_client.resource_for(stages.STAGE_API_VERSION, "Stage")
    await admin_client.create(stage_res, stage)
    try:
        await admin_client.create(ISVC, _isvc("crashy"), namespace)
        obj = await _wait_cond(admin_client, namespace, "crashy", "Ready", "False", "CrashLoopBackOff")
        assert "CrashLoopBackOff" in probes.condition(obj, "Ready")["message"]
        assert "url" not in obj["status"]
        # visible in `kubectl get isvc` (the Reason printer column)
        rc, out, err = await kubectl("get", "isvc", "crashy", "-n", namespace)
        assert rc == 0, err
        assert "CrashLoopBackOff" in out, out
    finally:
        await admin_client.delete(stage_res, stage["metadata"]["name"])


async def test_a_port_the_runtime_binds_itself_is_an_invalid_spec_not_a_crashloop(
    admin_client: rclient.Client, namespace: str, operator: rmanager.Manager
) -> None:
    # Triton binds gRPC on 8001: as the serving port its pods could never start
    await admin_client.create(ISVC, _isvc("clash", framework="triton", port=8001), namespace)
    obj = await _wait_cond(admin_client, namespace, "clash", "Ready", "False", "InvalidSpec")
    assert "spec.predictor.port" in probes.condition(obj, "Ready")["message"]
    assert not await probes.exists(admin_client, resources.DEPLOYMENT, namespace, "clash-predictor")


async def test_model_change_rolls_out_and_active_version_follows(
    admin_client: rclient.Client, namespace: str, operator: rmanager.Manager
) -> None:
    await _create_ready(admin_client, namespace, "roll", minReplicas=2, maxReplicas=2)
    await admin_client.patch(ISVC, "roll", {"spec": {"modelUri": "s3://models/m/2"}}, namespace=namespace)

    await wait.until(
        lambda: _ready_with(admin_client, namespace, "roll", activeVersion="s3://models/m/2"),
        timeout=90,
        what="activeVersion follows the rollout",
    )
    dep = await admin_client.get(resources.DEPLOYMENT, "roll-predictor", namespace)
    envs = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert envs["MODEL_URI"] == "s3://models/m/2"


async def test_kubectl_scale_replicas_follow_and_hpa_only_when_min_below_max(
    admin_client: rclient.Client, namespace: str, operator: rmanager.Manager, kubectl: plugin.Kubectl
) -> None:
    await _create_ready(admin_client, namespace, "sc", minReplicas=1, maxReplicas=5)
    assert await probes.exists(admin_client, resources.HPA, namespace, "sc-predictor")  # min < max

    # kubectl scale moves spec.minReplicas (the scale subresource); the HPA floor follows
    rc, _, err = await kubectl("scale", "isvc", "sc", "-n", namespace, "--replicas=3")
    assert rc == 0, err

    def ready_replicas(n: int) -> Awaitable[bool]:
        return _ready_with(admin_client, namespace, "sc", readyReplicas=n)

    await wait.until(lambda: ready_replicas(3), timeout=90, what="3 replicas after kubectl scale")
    hpa = await admin_client.get(resources.HPA, "sc-predictor", namespace)
    assert hpa["spec"]["minReplicas"] == 3

    # min == max: fixed size, no HPA, the Deployment is sized by the operator
    await admin_client.patch(ISVC, "sc", {"spec": {"minReplicas": 2, "maxReplicas": 2}}, namespace=namespace)
    await wait.until(
        lambda: probes.absent(admin_client, resources.HPA, namespace, "sc-predictor"), what="HPA removed"
    )
    await wait.until(lambda: ready_replicas(2), timeout=90, what="2 replicas at min == max")

    # min 0 where KEDA's CRDs are installed (as on the local cluster): a ScaledObject owns the
    # count from now on (it scales to zero when idle: KEDA's job), never an HPA; the operator
    # leaves the Deployment's count alone (scale to zero without KEDA: tests/unit, the demo)
    await admin_client.patch(ISVC, "sc", {"spec": {"minReplicas": 0}}, namespace=namespace)
    await wait.until(
        lambda: probes.exists(admin_client, SCALED_OBJECT, namespace, "sc-predictor"), what="ScaledObject"
    )
    assert not await probes.exists(admin_client, resources.HPA, namespace, "sc-predictor")
    dep = await admin_client.get(resources.DEPLOYMENT, "sc-predictor", namespace)
    assert dep["spec"]["replicas"] == 2


async def test_drift_is_repaired_and_delete_cascades(
    admin_client: rclient.Client, namespace: str, operator: rmanager.Manager
) -> None:
    await _create_ready(admin_client, namespace, "drift", minReplicas=1, maxReplicas=3)
    uid = (await admin_client.get(resources.DEPLOYMENT, "drift-predictor", namespace))["metadata"]["uid"]
    await admin_client.delete(resources.DEPLOYMENT, "drift-predictor", namespace)

    async def restored() -> bool:
        try:
            dep = await admin_client.get(resources.DEPLOYMENT, "drift-predictor", namespace)
        except rclient.ApiError:
            return False
        return dep["metadata"]["uid"] != uid

    await wait.until(restored, timeout=60, what="deleted Deployment restored")
    await admin_client.patch(
        resources.SERVICE,
        "drift-predictor",
        {"spec": {"ports": [{"name": "http", "port": 9999}]}},
        namespace=namespace,
    )

    async def service_repaired() -> bool:
        svc = await admin_client.get(resources.SERVICE, "drift-predictor", namespace)
        return [p["port"] for p in svc["spec"]["ports"]] == [8080, 8082]  # http, metrics

    await wait.until(service_repaired, timeout=60, what="edited Service repaired")
    await admin_client.delete(ISVC, "drift", namespace, propagation_policy="Background")
    for res in (resources.DEPLOYMENT, resources.SERVICE, resources.HPA):
        await wait.until(
            lambda res=res: probes.absent(admin_client, res, namespace, "drift-predictor"),
            what=f"{res.kind} GC",
        )


async def test_steady_state_makes_no_writes(
    admin_client: rclient.Client, namespace: str, operator: rmanager.Manager
) -> None:
    """Every child kind present (Deployment, Service, HPA, NetworkPolicy, PrometheusRule,
    ServiceMonitor): 500 reconciles write nothing."""
    policy_on = {"networkPolicy": {"enabled": True}}
    await _create_ready(admin_client, namespace, "calm", minReplicas=2, maxReplicas=4, extensions=policy_on)
    await _wait_cond(admin_client, namespace, "calm", "MonitoringReady", "True", "MonitoringConfigured")
    # the HPA's own conditions settle after Ready (Pending, then no metrics yet, then ScalingActive
    # once metrics-server has the pods' usage): each a real status change, not a steady-state write
    await wait.for_condition(
        admin_client, ISVC, namespace, "calm", "AutoscalerReady", "True", "ScalingActive", timeout=120
    )
    for res, name in (
        (resources.HPA, "calm-predictor"),
        (resources.NETWORK_POLICY, "calm"),
        (PROMETHEUS_RULE, "calm"),
        (SERVICE_MONITOR, "calm"),
    ):
        assert await probes.exists(admin_client, res, namespace, name), (res.kind, name)
    ctrl = operator.controllers[0]
    # nothing queued (not idle(): a cluster-wide operator backs off on namespaces other tests are deleting)
    await wait.until(lambda: ctrl.queue.len() == 0, what="queue empty")
    from mlops_platform.runtime.control.reconcile import Request

    # counted for this object and its children only: the operator's other work (a namespace an
    # earlier test left terminating, with objects still being reconciled there) is not this test's
    with requests.recording(operator.client) as recorder:
        for _ in range(500):
            result = await ctrl.reconciler.reconcile(Request(namespace, "calm"))
            assert result.requeue_after is None
            assert not result.requeue
    assert recorder.writes(namespace, names=requests.owned_by("calm")) == {}


async def test_monitoring_children_are_accepted_and_follow_the_spec(
    admin_client: rclient.Client, namespace: str, operator: rmanager.Manager
) -> None:
    """PrometheusRule and ServiceMonitor pass the upstream CRD schemas; turned off, they go."""
    await admin_client.create(ISVC, _isvc("mon", framework="triton", minReplicas=2, maxReplicas=3), namespace)
    obj = await _wait_cond(admin_client, namespace, "mon", "MonitoringReady", "True", "MonitoringConfigured")
    rule = await admin_client.get(PROMETHEUS_RULE, "mon", namespace)
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts == [
        "InferenceServiceNoReadyReplica",
        "InferenceServiceBelowMinReplicas",
        "InferenceServiceHighErrorRatio",
        "InferenceServiceHighLatency",
    ]
    monitor = await admin_client.get(SERVICE_MONITOR, "mon", namespace)
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    for child in (rule, monitor):
        assert child["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    svc = await admin_client.get(resources.SERVICE, "mon-predictor", namespace)
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"http": 8080, "metrics": 8002}

    await admin_client.patch(
        ISVC, "mon", {"spec": {"extensions": {"monitoring": {"enabled": False}}}}, namespace=namespace
    )
    obj = await _wait_cond(admin_client, namespace, "mon", "MonitoringReady", "True", "MonitoringDisabled")
    for res in (PROMETHEUS_RULE, SERVICE_MONITOR):
        await wait.until(
            lambda res=res: probes.absent(admin_client, res, namespace, "mon"), what=f"{res.kind} deleted"
        )


async def test_network_policy_selects_exactly_the_predictor_pods_of_its_service(
    admin_client: rclient.Client, namespace: str, operator: rmanager.Manager
) -> None:
    policy_on = {"networkPolicy": {"enabled": True}}
    await admin_client.create(
        ISVC, _isvc("np", minReplicas=2, maxReplicas=2, extensions=policy_on), namespace
    )
    await admin_client.create(ISVC, _isvc("np2", minReplicas=1, maxReplicas=1), namespace)
    # a pod that shares the seed's "app" label but is not a predictor of np
    stray = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "np-lookalike", "labels": {"app": "np", "app.kubernetes.io/instance": "np"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }
    await admin_client.create(resources.POD, stray, namespace)
    await _wait_cond(admin_client, namespace, "np", "NetworkPolicyReady", "True", "PolicyApplied")
    await _wait_cond(admin_client, namespace, "np", "Ready", "True")
    await _wait_cond(admin_client, namespace, "np2", "Ready", "True")
    policy = await admin_client.get(resources.NETWORK_POLICY, "np", namespace)
    assert not await probes.exists(admin_client, resources.NETWORK_POLICY, namespace, "np2")  # opt-in
    match = policy["spec"]["podSelector"]["matchLabels"]
    selected = await admin_client.list(
        resources.POD, namespace, label_selector=",".join(f"{k}={v}" for k, v in match.items())
    )
    dep = await admin_client.get(resources.DEPLOYMENT, "np-predictor", namespace)
    want = dep["spec"]["selector"]["matchLabels"]
    every = (await admin_client.list(resources.POD, namespace))["items"]
    predictors = {
        p["metadata"]["name"] for p in every if want.items() <= (p["metadata"].get("labels") or {}).items()
    }
    assert len(predictors) == 2
    assert {p["metadata"]["name"] for p in selected["items"]} == predictors
    others = {p["metadata"]["name"] for p in every} - predictors
    assert "np-lookalike" in others
    assert any(n.startswith("np2-predictor-") for n in others)
    await admin_client.delete(resources.POD, "np-lookalike", namespace)
    assert policy["spec"]["ingress"][0]["ports"] == [
        {"protocol": "TCP", "port": "http"},
        {"protocol": "TCP", "port": "grpc"},
    ]
