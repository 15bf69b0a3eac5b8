"""Remove ONE generated RBAC rule at a time: the failure must show on the InferenceService.

Every case runs at once in its own namespace (namespace-scoped mode: a Role with every generated
rule but one, an operator watching only that namespace, authenticated as the ServiceAccount), so
the module takes about as long as its slowest case. Two rules cannot be reported on an object,
because without them the operator never gets to reconcile one; for those the named test asserts
the operator-level signal instead (documented in docs/rbac.md):
- ``inferenceservices`` list/watch: the manager fails to start with an error naming the resource;
- ``leases`` (leader election): the replica never leads and never reports ready.

The same cases run again IN the cluster (:func:`pod_cases`): each operator a pod of the image built
here on the real node, as the install runs it (its Deployment from ``deploy.install``, one
replica, the ServiceAccount's token mounted), with its webhook off (it would inject its CA bundle
into the session's CRD); there the two operator-level signals are the pod's: its container ends
naming ``inferenceservices`` (its termination message), and without the Lease rule no Lease is
ever written and the InferenceService never gets a status.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mlops_platform.controllers.inferenceservice import controller
from mlops_platform.deploy import install
from mlops_platform.deploy import rbac as deploy_rbac
from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import identity, incluster, isvc, operator, probes, wait, webhook

ISVC = isvc.RESOURCE  # v1alpha1 objects: every request goes through the conversion webhook

# rule removed -> (what must appear in the Reconciled condition message or None, Event reason or None)
EXPECT: dict[str, tuple[str | None, str | None]] = {
    "pods": ("list/watch pods", "PermissionDenied"),
    "services": ('cannot patch resource "services"', "ApplyFailed"),
    "deployments.apps": ('cannot patch resource "deployments"', "ApplyFailed"),
    "horizontalpodautoscalers.autoscaling": (
        'cannot patch resource "horizontalpodautoscalers"',
        "ApplyFailed",
    ),
    "events.events.k8s.io": ("create events.events.k8s.io", None),  # no Event can be written
    "inferenceservices.mlops.platform/status": (None, "StatusUpdateFailed"),  # no status can be written
    "inferenceservices.mlops.platform": (None, None),  # operator-level: manager fails naming it
    "leases.coordination.k8s.io": (None, None),  # operator-level: never leads, never ready
    "networkpolicies.networking.k8s.io": ('cannot patch resource "networkpolicies"', "ApplyFailed"),
    # optional kinds: without list/watch their informer never syncs, so nothing is applied blind
    "prometheusrules.monitoring.coreos.com": (
        "list/watch prometheusrules.monitoring.coreos.com",
        "PermissionDenied",
    ),
    "servicemonitors.monitoring.coreos.com": (
        "list/watch servicemonitors.monitoring.coreos.com",
        "PermissionDenied",
    ),
    # canary gating and routes: reported like any other list/watch (no canary needed to see it)
    "endpointslices.discovery.k8s.io": (
        "list/watch endpointslices.discovery.k8s.io",
        "PermissionDenied",
    ),
    "virtualservices.networking.istio.io": (
        "list/watch virtualservices.networking.istio.io",
        "PermissionDenied",
    ),
    "httproutes.gateway.networking.k8s.io": (
        "list/watch httproutes.gateway.networking.k8s.io",
        "PermissionDenied",
    ),
    "scaledobjects.keda.sh": ("list/watch scaledobjects.keda.sh", "PermissionDenied"),
    # without it no optional kind can be discovered: the cache starts degraded and says why
    "customresourcedefinitions.apiextensions.k8s.io": (
        "list/watch customresourcedefinitions.apiextensions.k8s.io",
        "PermissionDenied",
    ),
}

#: rules only the conversion webhook uses (its certificate Secret): the reconciler never needs them,
#: so removing one shows nothing on an InferenceService (the webhook's own tests cover them)
WEBHOOK_ONLY = {"secrets"}
#: the canary analysis' Prometheus queries (issue 42): the cases' InferenceService has no analysis,
#: and a namespaced case's Role could not reach Prometheus' namespace anyway; without the rule an
#: analysis holds with CanaryAnalysis=False/PrometheusUnreachable naming the 403 (the progressive
#: delivery e2e is to prove it)
ANALYSIS_ONLY = {"services/proxy"}

#: how long a case's manager waits for its caches before it starts degraded (or fails, without its
#: primary kind): the cases' conditions can show only after it
CACHE_SYNC_TIMEOUT = 20


@dataclasses.dataclass
class Case:
    rule: str
    namespace: str
    manager: rmanager.Manager
    task: asyncio.Task[None]
    objs: list[dict[str, Any]]


@dataclasses.dataclass
class PodCase:
    rule: str
    namespace: str
    objs: list[dict[str, Any]]


#: the in-cluster cases' operator: small requests (17 of them share the real node), webhook off
POD_RESOURCES = {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"cpu": "1000m", "memory": "768Mi"}}


def _operator_pod(ns: str) -> dict[str, Any]:
    """The install's Deployment for ``ns`` alone (one replica, the local image on the real node),
    its conversion webhook off."""
    (deployment,) = [
        o
        for o in install.install_objects(
            namespace=ns, watch_namespaces=[ns], image=incluster.IMAGE, replicas=1,
            resources=POD_RESOURCES, **incluster.PLACEMENT_ARGS,
        )
        if o["kind"] == "Deployment"
    ]  # fmt: skip
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = [a for a in container["args"] if not a.startswith("--webhook-")]
    # the ISVC-list case ends once its cache gives up: in 20 s, not the default 120 s
    container["args"] = [*args, "--webhook-bind-address=off", "--cache-sync-timeout=20"]
    return deployment


async def _start_pod_case(admin: rclient.Client, rule_name: str) -> PodCase:
    ns = f"rbacpod-{rule_name.split('.')[0].replace('/', '-')[:20]}-{uuid.uuid4().hex[:5]}"
    await admin.create(
        resources.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    rules = [r for r in deploy_rbac.declared_rules() if r.name != rule_name]
    objs = deploy_rbac.objects(namespace=ns, watch_namespaces=[ns], rules=rules, name=f"op-{ns}")
    await identity.apply_objects(admin, [*objs, _operator_pod(ns)])
    every_child = {"networkPolicy": {"enabled": True}}
    m = isvc.manifest(
        "m", modelUri="s3://m/1", framework="seldon", minReplicas=1, maxReplicas=2, extensions=every_child
    )
    await admin.create(ISVC, m, ns)
    return PodCase(rule_name, ns, objs)


async def _start_case(admin: rclient.Client, kubeconfig: Path, rule_name: str) -> Case:
    ns = f"rbac-{rule_name.split('.')[0].replace('/', '-')[:20]}-{uuid.uuid4().hex[:5]}"
    await admin.create(
        resources.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    )
    rules = [r for r in deploy_rbac.declared_rules() if r.name != rule_name]
    objs = deploy_rbac.objects(namespace=ns, watch_namespaces=[ns], rules=rules, name=f"op-{ns}")
    await identity.apply_objects(admin, objs)
    token = await identity.token_for(admin, ns, deploy_rbac.NAME)
    c = identity.client_with_token(kubeconfig, token)
    elect = rule_name.startswith("leases.")
    lease = "mlops-platform" if elect else ""
    # 17 managers start at once, each listing its kinds (the InferenceServices through the conversion
    # webhook): under make test's load a primary LIST took over 5 s, and a manager whose primary kind
    # is not synced when the wait ends fails instead of starting degraded
    options = operator.options(ns, lease=lease, cache_sync_timeout=CACHE_SYNC_TIMEOUT, **operator.FAST_LEASE)
    mgr = rmanager.Manager(c, options)
    controller.setup(mgr, workers=2)
    task = asyncio.create_task(mgr.run())
    every_child = {"networkPolicy": {"enabled": True}}  # every child kind is exercised
    m = isvc.manifest(
        "m", modelUri="s3://m/1", framework="seldon", minReplicas=1, maxReplicas=2, extensions=every_child
    )
    await admin.create(ISVC, m, ns)
    return Case(rule_name, ns, mgr, task, objs)


@pytest.fixture(scope="module")
async def cases(kube_cluster: Path, admin_client: rclient.Client) -> AsyncIterator[dict[str, Case]]:
    await webhook.install_crd(admin_client)
    started = await asyncio.gather(*(_start_case(admin_client, kube_cluster, name) for name in EXPECT))
    yield {c.rule: c for c in started}
    for c in started:
        c.manager.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(c.task, 30)
        await c.manager.client.close()
        await identity.delete_objects(admin_client, [o for o in c.objs if "namespace" not in o["metadata"]])
        await admin_client.delete(resources.NAMESPACE, c.namespace)


@pytest.fixture(scope="module")
async def pod_cases(
    local_cluster_name: str, admin_client: rclient.Client
) -> AsyncIterator[dict[str, PodCase]]:
    await webhook.install_crd(admin_client)
    await asyncio.to_thread(incluster.import_images, local_cluster_name)
    started = await asyncio.gather(*(_start_pod_case(admin_client, name) for name in EXPECT))
    yield {c.rule: c for c in started}
    for c in started:
        await admin_client.delete(resources.NAMESPACE, c.namespace)
        await identity.delete_objects(admin_client, [o for o in c.objs if "namespace" not in o["metadata"]])


def test_every_generated_rule_has_a_case() -> None:
    names = {r.name for r in deploy_rbac.declared_rules()}  # a name may have several rules (resourceNames)
    assert sorted(EXPECT) == sorted(names - WEBHOOK_ONLY - ANALYSIS_ONLY)


async def _reconciled(admin: rclient.Client, ns: str) -> dict[str, Any]:
    obj = await admin.get(ISVC, "m", ns)
    return probes.condition(obj, "Reconciled")


async def _event_notes(admin: rclient.Client, ns: str, reason: str) -> list[str]:
    items = (await admin.list(resources.EVENT, ns))["items"]
    return [e.get("note", "") for e in items if e["reason"] == reason and e["regarding"]["name"] == "m"]


async def _shows(
    admin: rclient.Client, namespace: str, rule: str, timeout: float, task: asyncio.Task[None] | None = None
) -> None:
    """Without ``rule`` the InferenceService in ``namespace`` says so (:data:`EXPECT`); ``task`` is
    the case's manager when it runs in this process (its end, if it ended, is part of a failure)."""
    message, reason = EXPECT[rule]
    if message:
        seen: list[dict[str, Any]] = [{}]

        async def condition() -> dict[str, Any] | None:
            seen[0] = cond = await _reconciled(admin, namespace)
            return cond if cond.get("status") == "False" and message in cond.get("message", "") else None

        try:
            cond = await wait.until(condition, timeout=timeout, what=f"Reconciled=False naming {message!r}")
        except TimeoutError as e:  # what the status said instead, and whether the manager still runs
            ended = ""
            if task is not None and task.done():
                ended = f"; the manager ended: {task.exception() if not task.cancelled() else 'cancelled'!r}"
            raise AssertionError(f"{e}; the last Reconciled condition: {seen[0]}{ended}") from e
        assert cond["reason"] in ("Forbidden", "ReconcileFailed"), cond
    if reason:
        resource = rule.split(".")[0]
        notes = await wait.until(
            lambda: _event_notes(admin, namespace, reason),
            timeout=timeout,
            what=f"Warning Event {reason}",
        )
        assert any(resource in n or "forbidden" in n.lower() for n in notes), notes


SHOWN = [r for r, (m, e) in EXPECT.items() if m or e]


@pytest.mark.parametrize("rule", SHOWN)
async def test_removing_a_rule_shows_on_the_inferenceservice(
    rule: str, cases: dict[str, Case], admin_client: rclient.Client
) -> None:
    case = cases[rule]
    await _shows(admin_client, case.namespace, rule, timeout=CACHE_SYNC_TIMEOUT + 60, task=case.task)


@pytest.mark.parametrize("rule", SHOWN)
async def test_in_the_cluster_removing_a_rule_shows_on_the_inferenceservice(
    rule: str, pod_cases: dict[str, PodCase], admin_client: rclient.Client
) -> None:
    # 17 operator pods start at once on the real node (about 40 s of CPU on 2 cores)
    await _shows(admin_client, pod_cases[rule].namespace, rule, timeout=180)


async def _termination_messages(admin: rclient.Client, namespace: str) -> list[str]:
    pods = await incluster.manager_pods(admin, namespace)
    out = []
    for p in pods:
        for status in (p.get("status") or {}).get("containerStatuses") or []:
            for state in (status.get("lastState") or {}, status.get("state") or {}):
                if "terminated" in state:
                    out.append(str(state["terminated"].get("message", "")))
    return out


async def test_in_the_cluster_without_list_on_inferenceservices_the_pod_ends_naming_it(
    pod_cases: dict[str, PodCase], admin_client: rclient.Client
) -> None:
    ns = pod_cases["inferenceservices.mlops.platform"].namespace

    async def named() -> list[str]:
        return [
            m
            for m in await _termination_messages(admin_client, ns)
            if "inferenceservices.mlops.platform" in m
        ]

    messages = await wait.until(named, timeout=180, what="the operator container ending, naming the resource")
    assert any("check RBAC list/watch permissions" in m for m in messages), messages


async def test_in_the_cluster_without_the_lease_rule_no_lease_and_no_status(
    pod_cases: dict[str, PodCase], admin_client: rclient.Client
) -> None:
    ns = pod_cases["leases.coordination.k8s.io"].namespace
    peer = pod_cases["pods"].namespace
    await wait.until(lambda: _reconciled(admin_client, peer), timeout=180, what="a peer pod reconciled")
    pods = await incluster.manager_pods(admin_client, ns)
    assert pods and all(not p["metadata"].get("deletionTimestamp") for p in pods), incluster.describe(pods)
    assert await incluster.leader(admin_client, ns) == ""
    with pytest.raises(rclient.ApiError) as absent:
        await admin_client.get(resources.LEASE, "mlops-platform-operator", ns)
    assert absent.value.not_found
    obj = await admin_client.get(ISVC, "m", ns)
    assert "status" not in obj or not obj["status"].get("conditions")


async def test_without_list_on_inferenceservices_the_manager_fails_naming_it(cases: dict[str, Case]) -> None:
    case = cases["inferenceservices.mlops.platform"]
    with pytest.raises(rcache.CacheSyncTimeout, match=r"inferenceservices\.mlops\.platform"):
        await asyncio.wait_for(asyncio.shield(case.task), CACHE_SYNC_TIMEOUT + 30)
    errors = case.manager.cache.errors()
    assert "403" in str(errors.get("inferenceservices.mlops.platform")), errors


async def test_without_the_lease_rule_the_replica_never_leads_nor_reports_ready(
    cases: dict[str, Case], admin_client: rclient.Client
) -> None:
    case = cases["leases.coordination.k8s.io"]
    # the others' isvcs got a status by now; this one never does, and the manager is not ready
    await wait.until(
        lambda: _reconciled(admin_client, cases["pods"].namespace),
        timeout=CACHE_SYNC_TIMEOUT + 60,
        what="a peer reconciled",
    )
    assert case.manager.elector is not None
    assert not case.manager.elector.is_leader()
    assert not case.manager.is_ready()
    obj = await admin_client.get(ISVC, "m", case.namespace)
    assert "status" not in obj or not obj["status"].get("conditions")


async def test_namespaced_rbac_is_denied_outside_its_namespace_and_says_so(
    kube_cluster: Path, admin_client: rclient.Client
) -> None:
    """Namespace-scoped mode: Roles only in the watched namespace; outside it every call is a 403,
    and an operator configured to watch beyond its grant fails naming what it cannot list."""
    suffix = uuid.uuid4().hex[:5]
    inside, outside = f"rbac-in-{suffix}", f"rbac-out-{suffix}"
    for ns in (inside, outside):
        await admin_client.create(
            resources.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
    objs = deploy_rbac.objects(namespace=inside, watch_namespaces=[inside], name=f"op-{inside}")
    try:
        await identity.apply_objects(admin_client, objs)
        c = identity.client_with_token(
            kube_cluster, await identity.token_for(admin_client, inside, deploy_rbac.NAME)
        )
        async with c:
            await c.list(ISVC, inside)  # allowed
            with pytest.raises(rclient.ApiError) as denied:
                await c.list(ISVC, outside)
            assert denied.value.status == 403
            assert 'cannot list resource "inferenceservices"' in denied.value.message
            mgr = rmanager.Manager(c, operator.options(cache_sync_timeout=3))
            controller.setup(mgr)
            with pytest.raises(rcache.CacheSyncTimeout, match=r"inferenceservices\.mlops\.platform"):
                await asyncio.wait_for(mgr.run(), 30)
            assert "403" in str(mgr.cache.errors()["inferenceservices.mlops.platform"])
    finally:
        await identity.delete_objects(admin_client, [o for o in objs if "namespace" not in o["metadata"]])
        for ns in (inside, outside):
            await admin_client.delete(resources.NAMESPACE, ns)
