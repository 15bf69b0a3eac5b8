"""Why a service does not serve, on its status: each cause the local cluster can produce shows as
``Ready=False`` with the documented reason and the upstream message, within 10 seconds.

The operator runs in this process with admin credentials (the RBAC suite proves its own rules);
each test makes one cause in its own namespace: a GPU request no node can satisfy and a taint on
every node (the scheduler's ``Unschedulable``), a ResourceQuota and a LimitRange that make the
ReplicaSet's pod creation fail (``FailedCreate``), and an image that cannot be pulled (a kwok
stage).
"""

from __future__ import annotations

import time
from typing import Any

from mlops_platform import why
from mlops_platform.devcluster import nodes
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import isvc, probes, stages, wait

ISVC = isvc.RESOURCE  # v1alpha1 objects: every request goes through the conversion webhook
WITHIN = 10.0  # the acceptance bound, measured from the cause's creation
QUOTA = rclient.Resource("", "v1", "resourcequotas", "ResourceQuota")
LIMIT_RANGE = rclient.Resource("", "v1", "limitranges", "LimitRange")


async def _not_ready(c: rclient.Client, ns: str, name: str, reason: str, started: float) -> dict[str, Any]:
    """Wait for ``Ready=False/<reason>`` (within the bound), then check ``why`` says the same."""
    obj = await wait.for_condition(c, ISVC, ns, name, "Ready", "False", reason, timeout=60)
    took = time.monotonic() - started
    print(f"\n{name}: Ready=False/{reason} {took:.1f}s after the cause")
    assert took < WITHIN, f"{reason} took {took:.1f}s"
    ready = probes.condition(obj, "Ready")
    text = " ".join(why.render_text(why.analyze(await why.read(c, ns, name)), width=400).split())
    assert reason in text and " ".join(ready["message"].split()) in text, text
    return ready


def _model(name: str, **spec: Any) -> dict[str, Any]:
    return isvc.manifest(name, modelUri=f"s3://models/{name}/1", framework="seldon", **spec)


async def test_a_gpu_request_no_node_can_satisfy_says_insufficient_gpu(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    too_many = nodes.GPUS_PER_NODE * 2
    started = time.monotonic()
    await admin_client.create(ISVC, _model("big", gpuPerReplica=too_many), namespace)
    ready = await _not_ready(admin_client, namespace, "big", "Unschedulable", started)
    assert "cannot be scheduled" in ready["message"]
    assert "Insufficient nvidia.com/gpu" in ready["message"]  # the scheduler's own words


async def test_a_taint_on_every_node_says_untolerated_taint(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    """Every node tainted for a moment (NoSchedule: running pods stay; the tests of this process run
    one at a time, so nothing else is being scheduled meanwhile), then restored as it was."""
    taint = {"key": "mlops.platform/e2e-maintenance", "value": namespace[:63], "effect": "NoSchedule"}
    items = (await admin_client.list(resources.NODE))["items"]
    before = {n["metadata"]["name"]: (n.get("spec") or {}).get("taints") for n in items}
    try:
        for name, taints in before.items():
            patch = {"spec": {"taints": [*(taints or []), taint]}}
            await admin_client.patch(resources.NODE, name, patch)
        started = time.monotonic()
        await admin_client.create(ISVC, _model("tainted"), namespace)
        ready = await _not_ready(admin_client, namespace, "tainted", "Unschedulable", started)
        assert "had untolerated taint" in ready["message"]  # the scheduler's words (no key since 1.3x)
    finally:
        for name, taints in before.items():
            await admin_client.patch(resources.NODE, name, {"spec": {"taints": taints}})


def _policy(resource: rclient.Resource, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": name},
        "spec": spec,
    }


async def _failed_create_under(
    c: rclient.Client, ns: str, resource: rclient.Resource, policy: dict[str, Any], name: str, **spec: Any
) -> str:
    """The ``policy`` object in the namespace, then the InferenceService ``name``: the message of its
    ``Ready=False/FailedCreate`` (within the bound from the policy's creation)."""
    started = time.monotonic()
    await c.create(resource, policy, ns)
    await c.create(ISVC, _model(name, **spec), ns)
    ready = await _not_ready(c, ns, name, "FailedCreate", started)
    return str(ready["message"])


async def test_a_resource_quota_that_forbids_pods_says_exceeded_quota(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    quota = _policy(QUOTA, "no-pods", {"hard": {"pods": "0"}})
    message = await _failed_create_under(admin_client, namespace, QUOTA, quota, "quota")
    assert "exceeded quota: no-pods" in message


async def test_a_limit_range_below_the_request_says_which_limit(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    limits = _policy(LIMIT_RANGE, "small", {"limits": [{"type": "Container", "max": {"cpu": "100m"}}]})
    spec = {"resources": {"cpuRequest": "500m", "cpuLimit": "1"}}
    message = await _failed_create_under(admin_client, namespace, LIMIT_RANGE, limits, "limited", **spec)
    assert "maximum cpu usage per Container is 100m" in message


async def test_an_image_that_cannot_be_pulled_says_so(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    stage = stages.crashloop_stage(
        f"pull-{namespace}"[:63], namespace, "app", "pull", reason="ImagePullBackOff"
    )
    stage_res = await admin_client.resource_for(stages.STAGE_API_VERSION, "Stage")
    await admin_client.create(stage_res, stage)
    try:
        started = time.monotonic()
        await admin_client.create(ISVC, _model("pull"), namespace)
        ready = await _not_ready(admin_client, namespace, "pull", "ImagePullBackOff", started)
        assert "container predictor: ImagePullBackOff" in ready["message"]
    finally:
        await admin_client.delete(stage_res, stage["metadata"]["name"])


async def test_a_readiness_probe_that_keeps_failing_says_so(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    stage = stages.not_ready_stage(f"notready-{namespace}"[:63], namespace, "app", "unready")
    async with stages.installed(admin_client, stage):
        started = time.monotonic()
        await admin_client.create(ISVC, _model("unready"), namespace)
        ready = await _not_ready(admin_client, namespace, "unready", "ReadinessProbeFailing", started)
        assert "is running but not ready: its readiness probe fails" in ready["message"]
