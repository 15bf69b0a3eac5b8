"""KEDA on the real control plane, with KEDA's CRDs (installed with the local cluster, from KEDA's
Go module): ``minReplicas: 0`` gets a ScaledObject and no HPA, accepted by the real schema;
switching to an HPA and back leaves only one of them; once "KEDA" (here: the test) scales the
Deployment up, the operator keeps that count and the service serves. KEDA absent and the deletion
order are unit tests (tests/unit/controllers/test_reconciler.py).

The KEDA operator is not run here (docs/autoscaling.md): waking from zero is its job.
"""

from __future__ import annotations

from mlops_platform.controllers.inferenceservice.children import scaledobject
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import isvc, probes, wait

ISVC = isvc.RESOURCE  # v1alpha1 objects: every request goes through the conversion webhook
SO = scaledobject.KIND.resource()


async def _exists(c: rclient.Client, res: rclient.Resource, ns: str, name: str) -> bool:
    return await probes.exists(c, res, ns, name)


async def test_a_zero_minimum_gets_a_scaledobject_and_switching_replaces_the_hpa(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    m = isvc.manifest("z", modelUri="s3://models/z/1", framework="seldon", minReplicas=0, maxReplicas=3)
    await admin_client.create(ISVC, m, namespace)
    await wait.until(
        lambda: _exists(admin_client, SO, namespace, "z-predictor"), timeout=30, what="ScaledObject"
    )
    so = await admin_client.get(SO, "z-predictor", namespace)
    assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (0, 3)
    assert not await _exists(admin_client, resources.HPA, namespace, "z-predictor")  # never both
    obj = await wait.for_condition(
        admin_client, ISVC, namespace, "z", "Ready", "False", "ScaledToZero", timeout=30
    )
    assert "KEDA ScaledObject z-predictor wakes it" in probes.condition(obj, "Ready")["message"]

    await admin_client.patch(ISVC, "z", {"spec": {"minReplicas": 1}}, namespace=namespace)
    await wait.until(
        lambda: _exists(admin_client, resources.HPA, namespace, "z-predictor"), timeout=30, what="HPA"
    )
    assert not await _exists(admin_client, SO, namespace, "z-predictor")

    await admin_client.patch(ISVC, "z", {"spec": {"minReplicas": 0}}, namespace=namespace)
    await wait.until(
        lambda: _exists(admin_client, SO, namespace, "z-predictor"), timeout=30, what="ScaledObject back"
    )
    assert not await _exists(admin_client, resources.HPA, namespace, "z-predictor")
    # the Deployment's count is KEDA's from now on: the operator does not set it back
    dep = await admin_client.get(resources.DEPLOYMENT, "z-predictor", namespace)
    await admin_client.patch(
        resources.DEPLOYMENT, "z-predictor", {"spec": {"replicas": 2}}, namespace=namespace
    )
    obj = await wait.for_condition(admin_client, ISVC, namespace, "z", "Ready", "True", "Serving", timeout=60)
    after = await admin_client.get(resources.DEPLOYMENT, "z-predictor", namespace)
    assert after["spec"]["replicas"] == 2 and dep["metadata"]["uid"] == after["metadata"]["uid"]
