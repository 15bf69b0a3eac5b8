"""Model delivery on the local cluster (issue #14): what each model-URI scheme wires into the
predictor Deployment, that the API server ADMITS those pods in a namespace enforcing the Pod
Security ``restricted`` profile (pods get created: no ``FailedCreate`` on the ReplicaSet), and that
a storage initializer failing with a termination message turns the InferenceService
``Ready=False/ModelDownloadFailed`` with that message (kwok Stages play the kubelet).

The operator runs in this process with admin credentials. Scheme wiring and the failure tests use
v1alpha1 objects (the model URI alone); the Secret, checksum and service-account tests create v1
objects with ``spec.predictor.model.sha256``, ``spec.predictor.model.storage``,
``spec.predictor.serviceAccountName`` and ``spec.canary.model.sha256``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from mlops_platform import api, why
from mlops_platform.api import v1
from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import httproute, model_mount, virtualservice
from mlops_platform.runtime import objects
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import isvc, objectstores, probes, stages, wait

ISVC = isvc.RESOURCE  # v1alpha1: every request goes through the conversion webhook
ISVC_V1 = api.RESOURCE
REPLICA_SET = rclient.Resource("apps", "v1", "replicasets", "ReplicaSet")
PV = rclient.Resource("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
PVC = rclient.Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
MESSAGE = "model download failed: 403 Forbidden: s3://models/{name}/1/model.onnx"


async def _restricted(c: rclient.Client, namespace: str) -> None:
    """``namespace`` enforces the restricted Pod Security profile (the admission plugin rejects a
    pod that does not meet it: the ReplicaSet then reports FailedCreate)."""
    await c.patch(resources.NAMESPACE, namespace, {"metadata": {"labels": RESTRICTED}})
    # the control: a pod that does not meet the profile is refused here
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "not-restricted"},
        "spec": {"containers": [{"name": "c", "image": "registry.example/c:1"}]},
    }

    # Pod Security admission reads the namespace's labels from its informer: a create just after the
    # patch can still pass (seen once in make test); the control holds once the label has reached it
    async def refused() -> rclient.ApiError | None:
        try:
            await c.create(resources.POD, bare, namespace)
        except rclient.ApiError as e:
            return e
        await c.delete(resources.POD, "not-restricted", namespace)  # admitted before the label: again
        return None

    error = await wait.until(refused, timeout=30, what="a non-restricted pod refused in the namespace")
    assert error.status == 403 and "violates PodSecurity" in str(error), error


def _model(name: str, uri: str, framework: str = "seldon", **spec: Any) -> dict[str, Any]:
    return isvc.manifest(name, modelUri=uri, framework=framework, minReplicas=1, maxReplicas=1, **spec)


async def _pod_spec(c: rclient.Client, ns: str, name: str, component: str = labels.PREDICTOR) -> Any:
    dep = await wait.until(
        lambda: probes.get_or_none(c, resources.DEPLOYMENT, ns, f"{name}-{component}"),
        timeout=30,
        what=f"Deployment {name}-{component}",
    )
    return dep["spec"]["template"]["spec"]


async def _admitted(c: rclient.Client, ns: str, name: str, component: str = labels.PREDICTOR) -> list[Any]:
    """The component's pods once the ReplicaSet created them all and they are Ready (kwok runs the
    init container to completion), after checking that no ReplicaSet failed to create one."""
    selector = f"{labels.INFERENCESERVICE}={name},{labels.COMPONENT}={component}"

    async def ready() -> list[Any] | None:
        for rs in (await c.list(REPLICA_SET, ns, label_selector=selector))["items"]:
            failure = objects.condition(rs, "ReplicaFailure") or {}
            assert failure.get("status") != "True", f"ReplicaSet {objects.name(rs)}: {failure}"
        pods = (await c.list(resources.POD, ns, label_selector=selector))["items"]
        return pods if pods and all(objects.condition_is(p, "Ready") for p in pods) else None

    pods: list[Any] = await wait.until(ready, timeout=60, what=f"{name} {component} pods Ready")
    events = (await c.list(resources.EVENT, ns))["items"]
    failed = [e.get("note") for e in events if e.get("reason") == "FailedCreate"]
    assert not failed, failed
    return pods


def _mounts(container: Any) -> dict[str, Any]:
    return {m["name"]: m for m in container.get("volumeMounts") or ()}


# -- each scheme ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "framework", "layout"),
    [
        ("s3://models/iris/1/", "seldon", "mlserver"),
        ("gs://models/resnet/3/model.onnx", "triton", "triton"),
        ("https://models.example.com/bert/bert.mar", "torchserve", "torchserve"),
        ("http://models.models.svc:8000/iris.tar.gz", "seldon", "mlserver"),
    ],
    ids=["s3", "gs", "https", "http"],
)
async def test_a_remote_model_is_fetched_by_an_admitted_storage_initializer(
    admin_operator: rmanager.Manager,
    admin_client: rclient.Client,
    namespace: str,
    uri: str,
    framework: str,
    layout: str,
) -> None:
    await _restricted(admin_client, namespace)
    await admin_client.create(ISVC, _model("remote", uri, framework), namespace)
    spec = await _pod_spec(admin_client, namespace, "remote")
    [init] = spec["initContainers"]
    assert init["name"] == model_mount.STORAGE_INITIALIZER
    assert init["command"] == ["python", "-m", "mlops_platform.storage"]
    assert init["args"] == ["fetch", uri, "/mnt/models", "--layout", layout, "--name", "remote"]
    assert init["terminationMessagePolicy"] == "File"
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    assert _mounts(init)["model-store"] == {"name": "model-store", "mountPath": "/mnt/models"}
    [server] = spec["containers"]
    assert _mounts(server) == {
        "model-store": {"name": "model-store", "mountPath": "/mnt/models", "readOnly": True}
    }
    assert {v["name"]: v for v in spec["volumes"]}["model-store"] == {"name": "model-store", "emptyDir": {}}
    assert "serviceAccountName" not in spec and spec["automountServiceAccountToken"] is False
    [pod] = await _admitted(admin_client, namespace, "remote")
    [status] = pod["status"]["initContainerStatuses"]
    assert status["state"]["terminated"]["reason"] == "Completed"
    await wait.for_condition(admin_client, ISVC, namespace, "remote", "Ready", "True", "Serving", timeout=60)


async def test_a_claim_is_mounted_read_only_at_its_path_and_admitted(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    """A statically bound claim (a PersistentVolume of the test's own, bound by name): the pod
    schedules, and no initializer runs."""
    await _restricted(admin_client, namespace)
    pv_name = f"models-{namespace}"[:63]
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": namespace, "name": "models"},
            "nfs": {"server": "nfs.example.com", "path": "/exports/models"},
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "models"},
        "spec": {
            "accessModes": ["ReadOnlyMany"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    await admin_client.create(PV, pv)
    try:
        await admin_client.create(PVC, claim, namespace)
        await admin_client.create(ISVC, _model("claimed", "pvc://models/iris/v3", "seldon"), namespace)
        spec = await _pod_spec(admin_client, namespace, "claimed")
        assert "initContainers" not in spec
        assert spec["volumes"] == [
            {"name": "model-store", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}}
        ]
        [server] = spec["containers"]
        assert _mounts(server)["model-store"] == {
            "name": "model-store",
            "mountPath": "/mnt/models",
            "readOnly": True,
            "subPath": "iris/v3",
        }
        await _admitted(admin_client, namespace, "claimed")
        await wait.for_condition(admin_client, ISVC, namespace, "claimed", "Ready", "True", timeout=60)
    finally:
        await admin_client.delete(PV, pv_name)


async def test_a_file_uri_points_the_server_at_the_path_in_its_image(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    await _restricted(admin_client, namespace)
    await admin_client.create(ISVC, _model("baked", "file:///opt/models/iris", "seldon"), namespace)
    spec = await _pod_spec(admin_client, namespace, "baked")
    assert "initContainers" not in spec and "volumes" not in spec
    [server] = spec["containers"]
    assert server["args"] == ["mlserver", "start", "/opt/models/iris"]
    assert {"name": "MLSERVER_MODELS_DIR", "value": "/opt/models/iris"} in server["env"]
    assert {"name": "MODEL_URI", "value": "file:///opt/models/iris"} in server["env"]
    await _admitted(admin_client, namespace, "baked")


# -- a failed download ------------------------------------------------------------------------------


@pytest.mark.parametrize("crashloop", [False, True], ids=["Init:Error", "Init:CrashLoopBackOff"])
async def test_a_failed_download_is_ready_false_model_download_failed_with_the_message(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str, crashloop: bool
) -> None:
    message = MESSAGE.format(name="broken")
    stage = stages.init_failure_stage(
        f"init-fail-{namespace}"[:63], namespace, "app", "broken", message, crashloop=crashloop
    )
    async with stages.installed(admin_client, stage):
        await _restricted(admin_client, namespace)
        started = time.monotonic()
        uri = "s3://models/broken/1/model.onnx"
        await admin_client.create(ISVC, _model("broken", uri, "triton"), namespace)
        obj = await wait.for_condition(
            admin_client, ISVC, namespace, "broken", "Ready", "False", "ModelDownloadFailed", timeout=60
        )
        print(f"\nbroken: Ready=False/ModelDownloadFailed {time.monotonic() - started:.1f}s after creation")
        ready = probes.condition(obj, "Ready")
        pods = (await admin_client.list(resources.POD, namespace, label_selector="app=broken"))["items"]
        names = {objects.name(p) for p in pods}
        assert any(ready["message"] == f"pod {n}: {message}" for n in names), (ready["message"], names)
        text = " ".join(
            why.render_text(why.analyze(await why.read(admin_client, namespace, "broken")), width=400).split()
        )
        assert f"ModelDownloadFailed: {ready['message']}" in text, text


def _canary_weight(route: dict[str, Any], canary_service: str) -> int:
    """The weight a VirtualService (``http[].route[]``) or an HTTPRoute (``rules[].backendRefs[]``)
    gives the Service ``canary_service``."""
    weight = 0
    for rule in route["spec"].get("http") or ():
        for dest in rule.get("route") or ():
            if dest["destination"]["host"].split(".")[0] == canary_service:
                weight += int(dest.get("weight", 100))
    for rule in route["spec"].get("rules") or ():
        for ref in rule.get("backendRefs") or ():
            if ref.get("name") == canary_service:
                weight += int(ref.get("weight", 1))
    return weight


async def _routes_to_the_canary(c: rclient.Client, ns: str, name: str) -> list[str]:
    """What sends requests to ``name``'s canary pods now, read from the cluster, whichever router the
    operator chose: its predictor Service selecting every component (the replicas router's route
    to a canary), or a VirtualService / HTTPRoute ``name`` giving the canary's Service a weight."""
    found = []
    service = await c.get(resources.SERVICE, f"{name}{labels.PREDICTOR_SUFFIX}", ns)
    selector = service["spec"].get("selector") or {}
    if selector.get(labels.COMPONENT) != labels.PREDICTOR:
        found.append(f"Service {objects.name(service)} selects {selector}")
    for kind in (virtualservice.KIND, httproute.KIND):
        route = await probes.get_or_none(c, kind.resource(), ns, name)  # None: no such route (or kind)
        if route is not None and (weight := _canary_weight(route, f"{name}-{labels.CANARY}")):
            found.append(f"{kind.kind} {name} gives the canary weight {weight}")
    return found


async def test_a_canary_whose_download_fails_gets_no_traffic_and_says_why(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    """Only the canary's pods fail (the stage selects the canary component): the predictor serves,
    ``CanaryReady=False/ModelDownloadFailed`` names the candidate's message, ``status.traffic``
    gives the candidate 0 % (no ready replica) and the predictor 100 %, and the route sends it
    nothing (the predictor Service selects the predictor's pods only; no weighted route names the
    canary's Service)."""
    message = "model download failed: no object at s3://models/cand/v2"
    stage = stages.init_failure_stage(
        f"canary-fail-{namespace}"[:63],
        namespace,
        "app",
        "cand",
        message,
        extra_selector={labels.COMPONENT: labels.CANARY},
    )
    async with stages.installed(admin_client, stage):
        spec = {"traffic": {"canaryVersion": "v2", "canaryPercent": 20}}
        await admin_client.create(ISVC, _model("cand", "s3://models/cand/v1", "seldon", **spec), namespace)
        canary_spec = await _pod_spec(admin_client, namespace, "cand", labels.CANARY)
        [init] = canary_spec["initContainers"]
        assert init["args"][:2] == ["fetch", "s3://models/cand/v2"]  # its own model
        obj = await wait.for_condition(
            admin_client, ISVC, namespace, "cand", "CanaryReady", "False", "ModelDownloadFailed", timeout=60
        )
        canary = probes.condition(obj, "CanaryReady")
        assert canary["message"].startswith("pod cand-canary-") and message in canary["message"]
        assert canary["message"].endswith("the candidate gets no traffic")
        obj = await wait.for_condition(
            admin_client, ISVC, namespace, "cand", "Ready", "True", "Serving", timeout=60
        )
        traffic = {t["component"]: t for t in obj["status"].get("traffic") or ()}
        assert traffic[labels.CANARY]["percent"] == 0, traffic
        assert traffic[labels.CANARY]["readyReplicas"] == 0, traffic
        assert traffic[labels.PREDICTOR]["percent"] == 100, traffic
        assert await _routes_to_the_canary(admin_client, namespace, "cand") == []


# -- awaiting the API merge: the storage fields --------------------------------------------------


def _v1(name: str, model: dict[str, Any], **predictor: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{v1.GROUP}/{v1.VERSION}",
        "kind": v1.KIND,
        "metadata": {"name": name},
        "spec": {"predictor": {"model": model, "runtime": "triton", **predictor}},
    }


SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
CANARY_SHA = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"


async def test_the_storage_secret_checksum_and_service_account_reach_admitted_pods(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    await _restricted(admin_client, namespace)
    secret = objectstores.s3_secret("s3-creds", "AKIAEXAMPLE", "not-a-real-secret")
    await admin_client.create(resources.SECRET, secret, namespace)
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "model-reader"}}
    await admin_client.create(resources.SERVICE_ACCOUNT, sa, namespace)
    model = {
        "uri": "s3://models/bert/7/model.onnx",
        "format": "onnx",
        "sha256": SHA,
        "storage": {
            "secretName": "s3-creds",
            "endpoint": "http://minio.storage.svc:9000",
            "region": "eu-west-1",
        },
    }
    await admin_client.create(ISVC_V1, _v1("secured", model, serviceAccountName="model-reader"), namespace)
    spec = await _pod_spec(admin_client, namespace, "secured")
    assert spec["serviceAccountName"] == "model-reader" and spec["automountServiceAccountToken"] is False
    [init] = spec["initContainers"]
    args = init["args"]
    assert args[args.index("--sha256") + 1] == SHA
    assert args[args.index("--credentials") + 1] == model_mount.CREDENTIALS_DIR
    assert args[args.index("--endpoint") + 1] == "http://minio.storage.svc:9000"
    assert args[args.index("--region") + 1] == "eu-west-1"
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[model_mount.CREDENTIALS_VOLUME]["secret"] == {
        "secretName": "s3-creds",
        "defaultMode": 0o444,
    }
    assert _mounts(init)[model_mount.CREDENTIALS_VOLUME]["readOnly"] is True
    [server] = spec["containers"]
    assert model_mount.CREDENTIALS_VOLUME not in _mounts(server)
    assert "secretKeyRef" not in str(spec) and "envFrom" not in str(spec)
    await _admitted(admin_client, namespace, "secured")


async def test_the_canary_fetches_its_own_checksum(
    admin_operator: rmanager.Manager, admin_client: rclient.Client, namespace: str
) -> None:
    await _restricted(admin_client, namespace)
    obj = _v1("checked", {"uri": "s3://models/bert/7/model.onnx", "sha256": SHA})
    obj["spec"]["canary"] = {
        "model": {"uri": "s3://models/bert/8/model.onnx", "sha256": CANARY_SHA},
        "trafficPercent": 10,
    }
    await admin_client.create(ISVC_V1, obj, namespace)
    for component, uri, sha in (
        (labels.PREDICTOR, "s3://models/bert/7/model.onnx", SHA),
        (labels.CANARY, "s3://models/bert/8/model.onnx", CANARY_SHA),
    ):
        [init] = (await _pod_spec(admin_client, namespace, "checked", component))["initContainers"]
        assert init["args"][1] == uri and init["args"][init["args"].index("--sha256") + 1] == sha
        assert init["args"][init["args"].index("--name") + 1] == "checked"
        await _admitted(admin_client, namespace, "checked", component)
