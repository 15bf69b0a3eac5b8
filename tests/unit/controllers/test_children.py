"""Pure child builders: golden files of the built objects, invariants, and conditions from live objects.

Regenerate the golden files after an intended change with::

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/controllers/test_children.py

and review the diff of ``tests/unit/controllers/golden/`` like code.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from mlops_platform import api
from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import (
    alert_settings,
    children,
    labels,
    runtime_overrides,
)
from mlops_platform.controllers.inferenceservice.children import (
    base,
    deployment,
    hpa,
    monitoring,
    networkpolicy,
    scaledobject,
    service,
)
from mlops_platform.testing.isvc import manifest

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
CTX = base.BuildContext()
Obj = dict[str, Any]


def make(name: str = "bert", namespace: str = "ml", **spec: Any) -> base.Target:
    """The predictor target of a v1alpha1 InferenceService with ``spec`` (camelCase keys)."""
    spec = {"modelUri": f"s3://models/{name}", "framework": "triton", **spec}
    metadata = {"uid": "uid-1", "generation": 1}
    isvc = api.decode(manifest(name, namespace=namespace, metadata=metadata, **spec))
    return base.slots(isvc, children.CHILDREN)[0].target


CASES: dict[str, dict[str, Any]] = {
    "triton-gpu": {"name": "resnet", "framework": "triton", "port": 8000, "gpuPerReplica": 1},
    "torchserve-hpa": {"name": "bert", "framework": "torchserve", "minReplicas": 2, "maxReplicas": 5},
    "torchserve-gpu-fixed": {
        "name": "llm",
        "framework": "torchserve",
        "gpuPerReplica": 2,
        "minReplicas": 2,
        "maxReplicas": 2,
    },
    "seldon-scale-to-zero": {
        "name": "iris",
        "framework": "seldon",
        "modelUri": "gs://bucket/iris/v3",
        "minReplicas": 0,
        "maxReplicas": 3,
    },
    "seldon-fixed": {"name": "churn", "framework": "seldon", "minReplicas": 3, "maxReplicas": 3},
    "custom-resources": {
        "name": "fraud",
        "framework": "triton",
        "port": 9000,
        "minReplicas": 1,
        "maxReplicas": 4,
        "resources": {"cpuRequest": "500m", "cpuLimit": "2", "memoryLimit": "4Gi"},
    },
    "policy-and-alert-overrides": {
        "name": "vision",
        "framework": "torchserve",
        "extensions": {
            "networkPolicy": {"enabled": True},
            "monitoring": {"alerts": {"errorRatio": 0.2, "latencySeconds": 0.25, "for": "10m"}},
        },
    },
    "monitoring-off": {
        "name": "quiet",
        "framework": "seldon",
        "extensions": {"monitoring": {"enabled": False}},
    },
}


def render(t: base.Target) -> str:
    """All children of ``t`` as one multi-document YAML, absent children named in a comment."""
    head = [f"# golden: children of InferenceService {t.isvc.namespace}/{t.isvc.name}"]
    docs = []
    for child in children.CHILDREN:
        obj = child.build(t, CTX)
        if obj is None:
            head.append(f"# {child.kind.kind} {child.name(t)}: not desired")
        else:
            docs.append(yaml.safe_dump(obj, sort_keys=False, width=100))
    return "\n".join(head) + "\n---\n" + "---\n".join(docs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    path = GOLDEN / f"{case}.yaml"
    text = render(make(**CASES[case]))
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{case} differs from {path.name}: review, then UPDATE_GOLDEN=1"


def delivered(uri: str, name: str = "bert", framework: str = "triton", **fields: Any) -> base.Target:
    """The predictor target of an InferenceService built directly in the internal model (the API
    versions do not spell the storage fields yet): ``uri`` with ``fields`` (sha256, storage, ...)."""
    isvc = internal.InferenceService(
        name, "ml", "uid-1", 1, framework, uri, **fields
    )  # fmt: skip
    return base.Target(isvc, base.predictor(isvc))


def canary_of(t: base.Target, uri: str, sha256: str | None = None, fmt: str | None = None) -> base.Target:
    """The canary target next to ``t``'s predictor, fetching its own ``uri`` (from the predictor's
    storage, as a candidate without its own)."""
    comp = base.Component(
        labels.CANARY, uri, "Canary", 1, 1, model_sha256=sha256, model_format=fmt, storage=t.isvc.storage
    )
    return base.Target(t.isvc, comp, all_components=(t.component, comp))


SHA = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
STORAGE = internal.ModelStorage("bert-s3", "https://minio.storage.svc:9000", "eu-west-1")
#: Deployments of the model-delivery cases (only the Deployment differs between schemes)
DELIVERY_CASES: dict[str, Any] = {
    "delivery-s3-secret-sha-serviceaccount": lambda: delivered(
        "s3://models/bert/7/",
        model_format="onnx",
        model_sha256=None,
        storage=STORAGE,
        service_account_name="bert-reader",
    ),
    "delivery-gs-archive-sha": lambda: delivered(
        "gs://models/iris/3/model.tar.gz", "iris", "seldon", model_format="sklearn", model_sha256=SHA
    ),
    "delivery-https-mar": lambda: delivered("https://models.example.com/bert.mar", framework="torchserve"),
    "delivery-pvc-subpath": lambda: delivered("pvc://models/bert/7", framework="triton"),
    "delivery-pvc-root": lambda: delivered("pvc://models", "iris", "seldon"),
    "delivery-file": lambda: delivered("file:///opt/models/bert", framework="triton"),
    "delivery-canary-own-model": lambda: canary_of(
        delivered("s3://models/bert/7/model.onnx", model_sha256=SHA, storage=STORAGE),
        "s3://models/bert/8/model.onnx",
        sha256="0" * 64,
        fmt="onnx",
    ),
}


@pytest.mark.parametrize("case", sorted(DELIVERY_CASES))
def test_golden_delivery(case: str) -> None:
    path = GOLDEN / f"{case}.yaml"
    t = DELIVERY_CASES[case]()
    c, isvc = t.component, t.isvc
    head = f"# golden: the {c.key} Deployment of {isvc.namespace}/{isvc.name}, model {c.model_uri}\n"
    text = head + "---\n" + yaml.safe_dump(deployment.build(t, CTX), sort_keys=False, width=100)
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{case} differs from {path.name}: review, then UPDATE_GOLDEN=1"


def test_no_orphan_golden_files() -> None:
    assert {p.stem for p in GOLDEN.glob("*.yaml")} == set(CASES) | set(DELIVERY_CASES)


def built(t: base.Target) -> dict[str, Obj | None]:
    return {c.kind.kind: c.build(t, CTX) for c in children.CHILDREN}


def present(t: base.Target, *, per_component: bool = True) -> list[Obj]:
    return [
        o
        for c in children.CHILDREN
        if c.per_component == per_component and (o := c.build(t, CTX)) is not None
    ]


def dep(t: base.Target) -> Obj:
    return deployment.build(t, CTX)


def container(isvc: base.Target) -> Obj:
    return cast(Obj, dep(isvc)["spec"]["template"]["spec"]["containers"][0])


# -- invariants ------------------------------------------------------------------------------------


def test_children_are_in_apply_order_and_share_one_signature() -> None:
    assert [c.kind.kind for c in children.CHILDREN] == [
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "ScaledObject",
        "VirtualService",
        "HTTPRoute",
        "NetworkPolicy",
        "PrometheusRule",
        "ServiceMonitor",
    ]
    assert [c.condition_type for c in children.CHILDREN] == [
        "DeploymentAvailable",
        "ServiceReady",
        "AutoscalerReady",
        "AutoscalerReady",
        "TrafficSplitReady",
        "TrafficSplitReady",
        "NetworkPolicyReady",
        "MonitoringReady",
        "MonitoringReady",
    ]
    t = make()
    assert {c.name(t) for c in children.CHILDREN if c.per_component} == {"bert-predictor"}
    assert {c.name(t) for c in children.CHILDREN if not c.per_component} == {"bert"}
    assert len({c.key for c in children.CHILDREN}) == len(children.CHILDREN)
    assert [c.kind.optional for c in children.CHILDREN] == [False] * 3 + [True] * 3 + [False] + [True] * 2


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_child_is_labelled_named_and_namespaced(case: str) -> None:
    t = make(**CASES[case])
    isvc = t.isvc
    common = {
        "app": isvc.name,
        labels.INFERENCESERVICE: isvc.name,
        labels.FRAMEWORK: isvc.framework,
        labels.K8S_INSTANCE: isvc.name,
        labels.K8S_MANAGED_BY: "mlops-platform",
        labels.K8S_PART_OF: "mlops-platform",
    }
    for per_component, name, component in (
        (True, f"{isvc.name}-predictor", "predictor"),
        (False, isvc.name, None),
    ):
        for obj in present(t, per_component=per_component):
            meta = obj["metadata"]
            assert (meta["name"], meta["namespace"]) == (name, "ml")
            assert obj["apiVersion"] and obj["kind"]
            assert "ownerReferences" not in meta  # the reconciler adds them
            assert common.items() <= meta["labels"].items()
            assert meta["labels"].get(labels.COMPONENT) == component
            assert meta["labels"][labels.K8S_COMPONENT] == (component or labels.SERVICE_COMPONENT)
            assert all(len(v) <= 63 for v in meta["labels"].values())


@pytest.mark.parametrize("case", sorted(CASES))
def test_build_is_pure(case: str) -> None:
    t = make(**CASES[case])
    first = built(t)
    assert first == built(t)
    assert t == make(**CASES[case])


def test_selector_is_stable_when_the_framework_changes() -> None:
    triton, torch = make(framework="triton"), make(framework="torchserve")
    a, b = dep(triton), dep(torch)
    assert a["spec"]["selector"] == b["spec"]["selector"] == {"matchLabels": labels.selector(triton.isvc)}
    assert set(labels.selector(triton.isvc)) == {labels.INFERENCESERVICE, labels.COMPONENT}
    assert service.build(triton, CTX)["spec"]["selector"] == service.build(torch, CTX)["spec"]["selector"]
    assert labels.selector(triton.isvc) == labels.selector(triton.isvc, "predictor")
    # ...while the pod template does change, so the switch rolls out new pods
    assert a["spec"]["template"] != b["spec"]["template"]
    assert a["spec"]["template"]["metadata"]["labels"][labels.FRAMEWORK] == "triton"
    for d in (a, b):
        assert (
            d["spec"]["selector"]["matchLabels"].items()
            <= d["spec"]["template"]["metadata"]["labels"].items()
        )


def test_selector_string() -> None:
    t = make(name="iris")
    want = "mlops.platform/component=predictor,mlops.platform/inferenceservice=iris"
    assert labels.selector_string(t.isvc) == want


@pytest.mark.parametrize(
    ("min_replicas", "max_replicas", "replicas", "with_hpa"),
    [
        (1, 1, 1, False),
        (3, 3, 3, False),
        (0, 1, 0, False),
        (0, 5, 0, False),
        (1, 2, None, True),
        (2, 5, None, True),
    ],
    ids=["one", "fixed-3", "zero", "zero-max-5", "hpa-1-2", "hpa-2-5"],
)
def test_replicas_and_hpa(min_replicas: int, max_replicas: int, replicas: int | None, with_hpa: bool) -> None:
    isvc = make(minReplicas=min_replicas, maxReplicas=max_replicas)
    spec = dep(isvc)["spec"]
    assert spec.get("replicas", "omitted") == (replicas if replicas is not None else "omitted")
    got = hpa.build(isvc, CTX)
    assert (got is not None) == with_hpa
    if got is not None:
        assert got["spec"]["scaleTargetRef"] == {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": deployment.name(isvc),
        }
        assert (got["spec"]["minReplicas"], got["spec"]["maxReplicas"]) == (min_replicas, max_replicas)
        assert got["spec"]["metrics"][0]["resource"]["target"] == {
            "type": "Utilization",
            "averageUtilization": 80,
        }


def test_rollout_defaults() -> None:
    spec = dep(make())["spec"]
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0},
    }
    startup = container(make())["startupProbe"]
    assert spec["progressDeadlineSeconds"] > startup["periodSeconds"] * startup["failureThreshold"]
    pod = spec["template"]["spec"]
    assert pod["enableServiceLinks"] is False
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_gpu_resources_image_and_toleration() -> None:
    isvc = make(framework="torchserve", gpuPerReplica=2)
    c = container(isvc)
    assert c["image"].endswith("-gpu")
    assert c["resources"]["limits"]["nvidia.com/gpu"] == c["resources"]["requests"]["nvidia.com/gpu"] == "2"
    assert dep(isvc)["spec"]["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    cpu = make(framework="torchserve")
    assert container(cpu)["image"].endswith("-cpu")
    assert "tolerations" not in dep(cpu)["spec"]["template"]["spec"]
    assert "limits" not in container(cpu)["resources"]


def test_a_terminating_server_drains_for_the_runtimes_drain_seconds() -> None:
    """A preStop sleep keeps a terminating pod serving until load balancers have dropped it."""
    c = container(make(framework="seldon"))
    assert c["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    table = runtime_overrides.load_overrides({"runtimes.yaml": "seldon: {drainSeconds: 0}"})
    pod = deployment.build(make(framework="seldon"), base.BuildContext(servers=table))["spec"]["template"][
        "spec"
    ]
    assert "lifecycle" not in pod["containers"][0]


def test_the_runtimes_placement_comes_before_the_gpu_toleration() -> None:
    table = runtime_overrides.load_overrides(
        {
            "runtimes.yaml": "torchserve: {nodeSelector: {pool: models}, "
            "tolerations: [{key: dedicated, operator: Exists, effect: NoSchedule}]}"
        }
    )
    ctx = base.BuildContext(servers=table)
    pod = deployment.build(make(framework="torchserve", gpuPerReplica=1), ctx)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "models"}
    assert [t["key"] for t in pod["tolerations"]] == ["dedicated", "nvidia.com/gpu"]
    cpu = deployment.build(make(framework="torchserve"), ctx)["spec"]["template"]["spec"]
    assert cpu["tolerations"] == [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(
    ("resources", "want"),
    [
        (None, {"requests": {"cpu": "1", "memory": "2Gi"}}),
        ({"cpuRequest": "250m"}, {"requests": {"cpu": "250m", "memory": "2Gi"}}),
        ({"memoryLimit": "1Gi"}, {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}),
        (
            {"cpuRequest": "2", "cpuLimit": "4", "memoryRequest": "8Gi", "memoryLimit": "8Gi"},
            {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
        ),
    ],
    ids=["defaults", "cpu-request", "limit-only-no-default-request", "all"],
)
def test_resources_from_spec(resources: Obj | None, want: Obj) -> None:
    isvc = make(resources=resources) if resources else make()
    assert container(isvc)["resources"] == want


@pytest.mark.parametrize(
    ("resources", "workers"),
    [
        (None, "1"),  # the default request, one core: MLServer's default, one worker
        ({"cpuRequest": "500m"}, "1"),
        ({"cpuRequest": "1500m"}, "1"),
        ({"cpuRequest": "2"}, "2"),
        ({"cpuRequest": "2", "cpuLimit": "4"}, "4"),  # the limit is what it may use
        ({"cpuLimit": "1"}, "1"),
        ({"cpuRequest": 3}, "3"),
    ],
)
def test_mlserver_runs_one_inference_worker_per_core(resources: Obj | None, workers: str) -> None:
    isvc = make(framework="seldon", resources=resources) if resources else make(framework="seldon")
    env = {e["name"]: e["value"] for e in container(isvc)["env"]}
    assert env["MLSERVER_PARALLEL_WORKERS"] == workers


def test_integer_quantities_reach_the_container_as_strings() -> None:
    """Quantities may be plain integers on the wire; the Deployment must carry them as quantities."""
    t = make(resources={"cpuRequest": 2, "memoryLimit": 1073741824})
    assert container(t)["resources"] == {"requests": {"cpu": "2"}, "limits": {"memory": "1073741824"}}


def test_container_wiring_follows_the_port_and_the_model() -> None:
    isvc = make(framework="seldon", port=9090, modelUri="pvc://models/iris")
    c = container(isvc)
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["MODEL_URI"] == "pvc://models/iris"
    assert env["MLSERVER_HTTP_PORT"] == "9090"
    assert c["ports"][0] == {"name": "http", "containerPort": 9090, "protocol": "TCP"}
    assert {c[p]["httpGet"]["port"] for p in ("readinessProbe", "livenessProbe", "startupProbe")} == {"http"}
    annotations = dep(isvc)["spec"]["template"]["metadata"]["annotations"]
    assert annotations[labels.MODEL_URI_ANNOTATION] == "pvc://models/iris"
    svc = service.build(isvc, CTX)
    assert svc["spec"]["ports"] == [
        {"name": "http", "port": 9090, "targetPort": "http", "protocol": "TCP"},
        {"name": "metrics", "port": 8082, "targetPort": "metrics", "protocol": "TCP"},
    ]
    assert svc["spec"]["type"] == "ClusterIP"


def test_triton_args_use_the_spec_port() -> None:
    args = container(make(framework="triton", port=8500))["args"]
    assert args[0] == "tritonserver"
    assert "--http-port=8500" in args
    assert "--model-repository=/mnt/models" in args


def test_cluster_url() -> None:
    isvc = make(name="iris", namespace="team-a", port=8080)
    assert service.cluster_url(isvc) == "http://iris-predictor.team-a.svc.cluster.local:8080"
    assert service.cluster_url(isvc, "example.internal").endswith(".svc.example.internal:8080")


# -- conditions from live objects ------------------------------------------------------------------


def live_deployment(
    *,
    replicas: int = 2,
    generation: int = 2,
    observed: int = 2,
    status: Obj | None = None,
    conditions: list[Obj] | None = None,
) -> Obj:
    st: Obj = {"observedGeneration": observed, **(status or {})}
    if conditions is not None:
        st["conditions"] = conditions
    return {"metadata": {"generation": generation}, "spec": {"replicas": replicas}, "status": st}


def cond(type_: str, status: str, reason: str, message: str = "") -> Obj:
    return {"type": type_, "status": status, "reason": reason, "message": message}


COMPLETE = cond(
    "Progressing", "True", "NewReplicaSetAvailable", 'ReplicaSet "x" has successfully progressed.'
)
UPDATING = cond("Progressing", "True", "ReplicaSetUpdated", 'ReplicaSet "x" is progressing.')
AVAILABLE = cond("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
UNAVAILABLE = cond(
    "Available", "False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability."
)
ALL_UP = {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2}


@pytest.mark.parametrize(
    ("live", "want"),
    [
        (None, ("Unknown", "Pending")),
        (live_deployment(status=ALL_UP, conditions=[AVAILABLE, COMPLETE]), ("True", "ReplicasAvailable")),
        (
            live_deployment(
                replicas=3,
                status={"replicas": 4, "updatedReplicas": 1, "availableReplicas": 3},
                conditions=[AVAILABLE, UPDATING],
            ),
            ("True", "RollingOut"),
        ),
        (
            live_deployment(
                status={"replicas": 3, "updatedReplicas": 2, "availableReplicas": 2}, conditions=[UPDATING]
            ),
            ("True", "RollingOut"),
        ),
        (
            live_deployment(
                status={"replicas": 1, "updatedReplicas": 1, "availableReplicas": 0},
                conditions=[UNAVAILABLE, UPDATING],
            ),
            ("False", "RollingOut"),
        ),
        (
            live_deployment(generation=3, observed=2, status=ALL_UP, conditions=[AVAILABLE, COMPLETE]),
            ("True", "RollingOut"),
        ),
        (
            live_deployment(
                status={"replicas": 3, "updatedReplicas": 1, "availableReplicas": 2},
                conditions=[
                    AVAILABLE,
                    cond(
                        "Progressing",
                        "False",
                        "ProgressDeadlineExceeded",
                        'ReplicaSet "x" has timed out progressing.',
                    ),
                ],
            ),
            ("False", "ProgressDeadlineExceeded"),
        ),
        (
            live_deployment(
                status={"replicas": 0},
                conditions=[
                    cond("ReplicaFailure", "True", "FailedCreate", 'pods "x" is forbidden: exceeded quota'),
                    UPDATING,
                ],
            ),
            ("False", "FailedCreate"),
        ),
        (
            live_deployment(
                replicas=3,
                status={"replicas": 3, "updatedReplicas": 3, "availableReplicas": 2},
                conditions=[UNAVAILABLE, COMPLETE],
            ),
            ("True", "PartiallyAvailable"),
        ),
        (
            live_deployment(
                status={"replicas": 2, "updatedReplicas": 2, "availableReplicas": 0},
                conditions=[UNAVAILABLE, COMPLETE],
            ),
            ("False", "NoReplicasAvailable"),
        ),
    ],
    ids=[
        "absent",
        "available",
        "rolling-out-updating",
        "rolling-out-old-pods",
        "first-rollout-not-ready",
        "generation-not-observed",
        "deadline-exceeded",
        "replica-failure",
        "scaling-up-after-rollout",
        "all-pods-lost",
    ],
)
def test_deployment_condition(live: Obj | None, want: tuple[str, str]) -> None:
    isvc = make(minReplicas=1, maxReplicas=4)
    got = deployment.condition(isvc, CTX, dep(isvc), live)
    assert got.type == "DeploymentAvailable"
    assert (got.status, got.reason) == want
    assert got.reason[0].isupper() and " " not in got.reason
    assert got.message


def test_deployment_condition_messages() -> None:
    isvc = make(minReplicas=1, maxReplicas=4)
    stuck = live_deployment(
        conditions=[
            cond(
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                'ReplicaSet "x" has timed out progressing.',
            )
        ]
    )
    assert deployment.condition(isvc, CTX, None, stuck).message == 'ReplicaSet "x" has timed out progressing.'
    stale_deadline = live_deployment(generation=3, observed=2, conditions=stuck["status"]["conditions"])
    assert (
        deployment.condition(isvc, CTX, None, stale_deadline).reason == "RollingOut"
    )  # a new spec gets its chance
    ok = live_deployment(status=ALL_UP, conditions=[AVAILABLE, COMPLETE])
    assert deployment.condition(isvc, CTX, None, ok).message == "2/2 replicas available"


@pytest.mark.parametrize(("pods", "mentions"), [(0, "scaled to zero"), (2, "2 pod(s) still terminating")])
def test_deployment_condition_scaled_to_zero(pods: int, mentions: str) -> None:
    isvc = make(framework="seldon", minReplicas=0, maxReplicas=3)
    live = live_deployment(replicas=0, status={"replicas": pods}, conditions=[AVAILABLE, COMPLETE])
    got = deployment.condition(isvc, CTX, dep(isvc), live)
    assert (got.status, got.reason) == ("True", "ScaledToZero")
    assert mentions in got.message


@pytest.mark.parametrize(
    ("live", "want"),
    [
        (None, ("Unknown", "Pending")),
        ({"spec": {"clusterIP": "10.96.0.17"}}, ("True", "ClusterIPAssigned")),
        ({"spec": {}}, ("False", "NoClusterIP")),
    ],
    ids=["absent", "cluster-ip", "no-cluster-ip"],
)
def test_service_condition(live: Obj | None, want: tuple[str, str]) -> None:
    isvc = make()
    got = service.condition(isvc, CTX, service.build(isvc, CTX), live)
    assert (got.type, got.status, got.reason) == ("ServiceReady", *want)


ABLE = cond("AbleToScale", "True", "ReadyForNewScale", "recommended size matches current size")
ACTIVE = cond(
    "ScalingActive", "True", "ValidMetricFound", "the HPA was able to successfully calculate a replica count"
)


@pytest.mark.parametrize(
    ("live", "want"),
    [
        (None, ("Unknown", "Pending")),
        ({"status": {}}, ("Unknown", "Pending")),
        ({"status": {"conditions": [ABLE, ACTIVE]}}, ("True", "ScalingActive")),
        (
            {
                "status": {
                    "conditions": [
                        ABLE,
                        cond(
                            "ScalingActive",
                            "False",
                            "FailedGetResourceMetric",
                            "unable to get metrics for cpu",
                        ),
                    ]
                }
            },
            ("False", "FailedGetResourceMetric"),
        ),
        (
            {"status": {"conditions": [cond("AbleToScale", "False", "FailedGetScale", "no scale"), ACTIVE]}},
            ("False", "FailedGetScale"),
        ),
    ],
    ids=["absent", "not-evaluated", "active", "no-metrics", "cannot-scale"],
)
def test_hpa_condition(live: Obj | None, want: tuple[str, str]) -> None:
    isvc = make(minReplicas=2, maxReplicas=5)
    got = hpa.condition(isvc, CTX, hpa.build(isvc, CTX), live)
    assert (got.type, got.status, got.reason) == ("AutoscalerReady", *want)


def test_hpa_condition_reports_limits() -> None:
    isvc = make(minReplicas=2, maxReplicas=5)
    limited = cond(
        "ScalingLimited", "True", "TooManyReplicas", "the desired replica count is more than the maximum"
    )
    got = hpa.condition(isvc, CTX, hpa.build(isvc, CTX), {"status": {"conditions": [ABLE, ACTIVE, limited]}})
    assert got.status == "True"
    assert "more than the maximum" in got.message


@pytest.mark.parametrize(
    ("min_replicas", "max_replicas", "mentions"),
    [(3, 3, "fixed replica count"), (0, 4, "scaled to zero")],
    ids=["fixed", "scale-to-zero"],
)
def test_hpa_not_required(min_replicas: int, max_replicas: int, mentions: str) -> None:
    isvc = make(minReplicas=min_replicas, maxReplicas=max_replicas)
    assert hpa.build(isvc, CTX) is None
    stale = {"status": {"conditions": [ABLE, ACTIVE]}}  # the reconciler is about to delete it
    for live in (None, stale):
        got = hpa.condition(isvc, CTX, None, live)
        assert (got.status, got.reason) == ("True", "NotRequired")
        assert mentions in got.message


def test_settle_applies_the_live_replica_count_while_an_hpa_owns_it() -> None:
    isvc = make(minReplicas=2, maxReplicas=5)
    ctx = base.BuildContext()
    fresh = deployment.build(isvc, ctx)
    assert fresh is not None
    assert "replicas" not in fresh["spec"]
    deployment.settle(isvc, fresh, None)
    assert fresh["spec"]["replicas"] == 2  # a new Deployment starts at minReplicas, not 1
    scaled = deployment.build(isvc, ctx)
    assert scaled is not None
    deployment.settle(isvc, scaled, {"spec": {"replicas": 4}})
    assert scaled["spec"]["replicas"] == 4  # the HPA's choice, never ours
    fixed = deployment.build(make(minReplicas=3, maxReplicas=3), ctx)
    assert fixed is not None
    deployment.settle(make(minReplicas=3, maxReplicas=3), fixed, {"spec": {"replicas": 4}})
    assert fixed["spec"]["replicas"] == 3  # no HPA: the spec decides


# -- monitoring and network policy -----------------------------------------------------------------


def test_monitoring_is_on_by_default_and_off_per_object_or_operator_wide() -> None:
    t = make()
    assert monitoring.build_rule(t, CTX) is not None
    assert monitoring.build_monitor(t, CTX) is not None
    off = make(extensions={"monitoring": {"enabled": False}})
    assert monitoring.build_rule(off, CTX) is None
    assert monitoring.build_monitor(off, CTX) is None
    got = monitoring.RULE.condition(off, CTX, None, None)
    assert (got.status, got.reason) == ("True", "MonitoringDisabled")
    assert "spec.monitoring.enabled" in got.message  # the v1 field: the stored version
    operator_off = base.BuildContext(monitoring=False)
    assert monitoring.build_rule(t, operator_off) is None
    assert "--no-monitoring" in monitoring.RULE.condition(t, operator_off, None, None).message
    forced_on = make(extensions={"monitoring": {"enabled": True}})
    assert monitoring.build_rule(forced_on, operator_off) is not None


def test_alert_overrides_and_operator_labels_reach_the_rule() -> None:
    ctx = base.BuildContext(monitoring_labels={"release": "kube-prometheus"})
    t = make(extensions={"monitoring": {"alerts": {"errorRatio": 0.25, "for": "10m"}}})
    rule = monitoring.build_rule(t, ctx)
    assert rule is not None
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert rules["InferenceServiceHighErrorRatio"]["expr"].endswith("> 0.25")
    assert {r["for"] for r in rules.values()} >= {"10m"}
    monitor = monitoring.build_monitor(t, ctx)
    assert monitor is not None
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"


def test_the_scrape_interval_is_the_operators_and_a_long_one_widens_the_keda_trigger_window() -> None:
    t = make()
    default = monitoring.build_monitor(t, CTX)
    assert default is not None and default["spec"]["endpoints"][0]["interval"] == "30s"
    fast = base.BuildContext(scrape_interval="10s")
    monitor = monitoring.build_monitor(t, fast)
    assert monitor is not None and monitor["spec"]["endpoints"][0]["interval"] == "10s"
    elastic = of_runtime("triton", keda=True, minReplicas=0, maxReplicas=3)
    # a rate needs two samples in its window: one minute holds two of 30 s, not two of 45 s
    assert "[1m]" in scaledobject.query(elastic, fast)
    assert "[1m]" in scaledobject.query(elastic, CTX)
    assert "[90s]" in scaledobject.query(elastic, base.BuildContext(scrape_interval="45s"))


@pytest.mark.parametrize(
    ("extensions", "field"),
    [
        ({"monitoring": {"alerts": {"errorRatio": 2}}}, "spec.extensions.monitoring.alerts.errorRatio"),
        ({"monitoring": {"alerts": {"for": "soon"}}}, "spec.extensions.monitoring.alerts.for"),
        ({"monitoring": {"enabeld": True}}, "spec.extensions.monitoring"),
        ({"networkPolicy": {"enabled": "yes"}}, "spec.extensions.networkPolicy.enabled"),
        ({"monitoring": "on"}, "spec.extensions.monitoring"),
    ],
    ids=["ratio-range", "duration", "unknown-key", "bool", "not-an-object"],
)
def test_bad_extensions_are_rejected_naming_the_field(extensions: Obj, field: str) -> None:
    with pytest.raises(api.ValidationError) as err:
        make(extensions=extensions)
    assert field in str(err.value)


def test_unknown_extension_keys_are_preserved_and_ignored() -> None:
    assert make(extensions={"somethingLater": {"x": 1}}) == make()


def test_network_policy_is_opt_in_and_selects_every_component_of_one_service() -> None:
    assert networkpolicy.build(make(), CTX) is None
    t = make(framework="triton", extensions={"networkPolicy": {"enabled": True}})
    policy = networkpolicy.build(t, CTX)
    assert policy is not None
    assert policy["spec"]["podSelector"] == {"matchLabels": {labels.INFERENCESERVICE: "bert"}}
    serving, metrics = policy["spec"]["ingress"]
    assert [p["port"] for p in serving["ports"]] == ["http", "grpc"]
    assert serving["from"] == [{"podSelector": {}}]
    assert metrics["ports"] == [{"protocol": "TCP", "port": "metrics"}]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert networkpolicy.build(make(), base.BuildContext(network_policy=True)) is not None


def test_network_policy_peers_and_egress_from_operator_settings() -> None:
    ctx = base.BuildContext(
        network_policy=True,
        ingress_namespace_labels={"istio-injection": "enabled"},
        monitoring_namespace="observability",
        egress_cidrs=("10.0.0.0/8",),
    )
    policy = networkpolicy.build(make(), ctx)
    assert policy is not None
    serving, metrics = policy["spec"]["ingress"]
    assert serving["from"][1] == {"namespaceSelector": {"matchLabels": {"istio-injection": "enabled"}}}
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}}
    ]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"][0] == {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}
    off = make(extensions={"networkPolicy": {"enabled": False}})
    assert networkpolicy.build(off, ctx) is None


def test_replica_owner_is_stated_once() -> None:
    def owner(lo: int, hi: int, *, keda: bool = False) -> base.ReplicaOwner:
        return base.replica_owner(base.predictor(make(minReplicas=lo, maxReplicas=hi).isvc, keda=keda))

    assert owner(2, 5) is base.ReplicaOwner.HPA
    for lo, hi in ((1, 1), (0, 3), (3, 3)):
        assert owner(lo, hi) is base.ReplicaOwner.OPERATOR
    assert owner(0, 3, keda=True) is base.ReplicaOwner.KEDA  # scale from zero where KEDA is installed
    assert owner(2, 5, keda=True) is base.ReplicaOwner.HPA  # KEDA only for minReplicas 0
    zero = base.Component(labels.PREDICTOR, "s3://m/1", "", 0, 0, scale_to_zero=True)
    assert base.replica_owner(zero) is base.ReplicaOwner.OPERATOR  # nothing to scale to


def test_operator_labels_never_replace_the_operators_own() -> None:
    ctx = base.BuildContext(monitoring_labels={"app.kubernetes.io/managed-by": "helm", "release": "kps"})
    rule = monitoring.build_rule(make(), ctx)
    assert rule is not None
    assert rule["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "mlops-platform"
    assert rule["metadata"]["labels"]["release"] == "kps"


# -- runtimes a platform team adds: their metrics dialect ------------------------------------------

ADDED = base.BuildContext(
    servers=runtime_overrides.load_overrides(
        {
            "runtimes.yaml": """
mlserver-gpu: {basedOn: seldon, gpuImage: docker.io/seldonio/mlserver:1.7.1-gpu}
acme:
  image: registry.example.com/acme/server:1.2.3
  args: [serve, "--port={port}"]
  ports: {metrics: 9090}
  readinessProbe: {path: /ready}
  livenessProbe: {path: /live}
  metricsDialect: none
"""
        }
    )
)


def of_runtime(runtime: str, *, keda: bool = False, **spec: Any) -> base.Target:
    """The predictor target of ``make(**spec)`` served by ``runtime`` (a v1 ``spec.predictor.runtime``
    may name any entry of the table; v1alpha1's framework only the built-in ones)."""
    isvc = dataclasses.replace(make(**spec).isvc, framework=runtime)
    return base.Target(isvc, base.predictor(isvc, keda=keda))


def alert_rules(t: base.Target, ctx: base.BuildContext) -> dict[str, Obj]:
    rule = monitoring.build_rule(t, ctx)
    assert rule is not None
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def test_an_added_runtime_inherits_its_bases_alert_expressions_and_is_labelled_by_its_name() -> None:
    added, seldon = (
        alert_rules(of_runtime("mlserver-gpu", minReplicas=2, maxReplicas=4), ADDED),
        alert_rules(of_runtime("seldon", minReplicas=2, maxReplicas=4), ADDED),
    )
    assert set(added) == set(alert_settings.ALERTS)
    for alert, rule in added.items():
        assert rule["expr"] == seldon[alert]["expr"]
        assert rule["labels"]["framework"] == "mlserver-gpu"
    dep_labels = deployment.build(of_runtime("mlserver-gpu"), ADDED)["metadata"]["labels"]
    assert (dep_labels[labels.FRAMEWORK], dep_labels[labels.K8S_NAME]) == ("mlserver-gpu", "mlserver")


def test_a_runtime_without_request_metrics_gets_the_replica_alerts_only_and_says_so() -> None:
    t = of_runtime("acme", minReplicas=2, maxReplicas=4)
    assert set(alert_rules(t, ADDED)) == {alert_settings.NO_READY_REPLICA, alert_settings.BELOW_MIN_REPLICAS}
    rule = monitoring.build_rule(t, ADDED)
    got = monitoring.RULE.condition(t, ADDED, rule, rule)
    assert (got.status, got.reason) == ("True", "ReplicaAlertsOnly")
    assert "runtime 'acme' has metricsDialect none" in got.message
    assert "no request alerts (error ratio, latency, canary)" in got.message
    built_in = of_runtime("triton")
    rule = monitoring.build_rule(built_in, ADDED)
    assert monitoring.RULE.condition(built_in, ADDED, rule, rule).reason == "MonitoringConfigured"
    assert monitoring.build_monitor(t, ADDED) is not None  # its metrics port is still scraped


def test_a_runtime_without_request_metrics_scales_from_zero_on_the_mesh_count_alone() -> None:
    t = of_runtime("acme", keda=True, minReplicas=0, maxReplicas=3)
    so = scaledobject.build(t, ADDED)
    assert so is not None
    query = so["spec"]["triggers"][0]["metadata"]["query"]
    assert query.startswith("sum(rate(istio_requests_total{") and " or " not in query
    says = "the trigger is the mesh's request count alone (istio_requests_total): runtime 'acme'"
    assert says in scaledobject.wakes(t, ADDED)
    live = {**so, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert says in scaledobject.condition(t, ADDED, so, live).message
    seldon = scaledobject.build(of_runtime("mlserver-gpu", keda=True, minReplicas=0, maxReplicas=3), ADDED)
    assert seldon is not None
    assert "model_infer_request_success_total" in seldon["spec"]["triggers"][0]["metadata"]["query"]
    # a runtime with request metrics: no "alone" note (its own counter sizes it once awake)
    assert "trigger is the mesh's request count alone" not in scaledobject.wakes(
        of_runtime("seldon", keda=True, minReplicas=0, maxReplicas=3), ADDED
    )


# -- the InferenceService's autoscaling targets -------------------------------------------------------


def with_autoscaling(t: base.Target, **targets: Any) -> base.Target:
    isvc = dataclasses.replace(t.isvc, autoscaling=internal.Autoscaling(**targets))
    return dataclasses.replace(t, isvc=isvc)


def hpa_metrics(t: base.Target, ctx: base.BuildContext = CTX) -> list[tuple[str, int]]:
    obj = hpa.build(t, ctx)
    assert obj is not None
    return [
        (m["resource"]["name"], m["resource"]["target"]["averageUtilization"])
        for m in obj["spec"]["metrics"]
        if m["type"] == "Resource" and m["resource"]["target"]["type"] == "Utilization"
    ]


def test_the_hpa_targets_the_inferenceservices_utilization_else_the_runtimes() -> None:
    t = make(minReplicas=2, maxReplicas=5)
    assert hpa_metrics(t) == [("cpu", 80)]  # the runtime table's target
    platform = base.BuildContext(
        servers=runtime_overrides.load_overrides({"runtimes.yaml": "triton: {targetCpuUtilization: 60}"})
    )
    assert hpa_metrics(t, platform) == [("cpu", 60)]
    assert hpa_metrics(with_autoscaling(t, cpu_utilization=50), platform) == [("cpu", 50)]
    assert hpa_metrics(with_autoscaling(t, memory_utilization=75)) == [("cpu", 80), ("memory", 75)]
    both = with_autoscaling(t, cpu_utilization=65, memory_utilization=90)
    assert hpa_metrics(both) == [("cpu", 65), ("memory", 90)]
    assert hpa.build(with_autoscaling(make(), cpu_utilization=50), CTX) is None  # a fixed count: no HPA


def test_a_canarys_hpa_follows_the_same_targets() -> None:
    t = with_autoscaling(make(minReplicas=2, maxReplicas=6), cpu_utilization=55, memory_utilization=70)
    canary = base.Component(labels.CANARY, "s3://models/bert/v2", "Canary", 1, 6)
    target = base.Target(t.isvc, canary, all_components=(t.component, canary))
    obj = hpa.build(target, CTX)
    assert obj is not None
    assert obj["metadata"]["name"] == "bert-canary"
    assert obj["spec"]["scaleTargetRef"]["name"] == "bert-canary"
    assert hpa_metrics(target) == hpa_metrics(t) == [("cpu", 55), ("memory", 70)]


def test_the_scaledobject_takes_the_inferenceservices_scale_to_zero_policy() -> None:
    t = of_runtime("triton", keda=True, minReplicas=0, maxReplicas=3)
    default = scaledobject.build(t, CTX)
    assert default is not None
    assert default["spec"]["cooldownPeriod"] == scaledobject.COOLDOWN_SECONDS == 300
    assert default["spec"]["triggers"][0]["metadata"]["threshold"] == "10"  # --keda-requests-per-replica
    assert "one replica per 10 requests/s" in scaledobject.wakes(t, CTX)
    own = with_autoscaling(t, requests_per_replica=2.5, cooldown_seconds=60)
    so = scaledobject.build(own, CTX)
    assert so is not None
    assert so["spec"]["cooldownPeriod"] == 60
    assert so["spec"]["triggers"][0]["metadata"]["threshold"] == "2.5"
    assert "one replica per 2.5 requests/s" in scaledobject.wakes(own, CTX)
    operator = base.BuildContext(keda_requests_per_replica=4)
    built = scaledobject.build(t, operator)
    assert built is not None and built["spec"]["triggers"][0]["metadata"]["threshold"] == "4"


def test_v1_only_fields_reach_the_children() -> None:
    """What only v1 says (read through ``v1_decode.to_internal``) changes what the operator builds:
    ``targetUtilization`` the HPA's metrics, ``routing.router`` the router, ``canary.trafficPercent``
    the candidate's share."""
    from mlops_platform.controllers.inferenceservice import traffic

    obj = {
        "apiVersion": "mlops.platform/v1",
        "kind": "InferenceService",
        "metadata": {"name": "bert", "namespace": "ml", "uid": "uid-1", "generation": 1},
        "spec": {
            "predictor": {
                "model": {"uri": "s3://models/bert/7"},
                "runtime": "torchserve",
                "autoscaling": {
                    "minReplicas": 2,
                    "maxReplicas": 5,
                    "targetUtilization": {"cpu": 60, "memory": 70},
                },
            },
            "canary": {"model": {"uri": "s3://models/bert/8"}, "trafficPercent": 30},
            "routing": {"router": "replicas"},
        },
    }
    isvc = api.decode(obj)
    got = hpa.build(base.slots(isvc, children.CHILDREN)[0].target, CTX)
    assert got is not None
    targets = {
        m["resource"]["name"]: m["resource"]["target"]["averageUtilization"] for m in got["spec"]["metrics"]
    }
    assert targets == {"cpu": 60, "memory": 70}
    served = {base.Router.ISTIO, base.Router.GATEWAY_API, base.Router.REPLICAS}
    assert traffic.choose_router(isvc, CTX, served) is base.Router.REPLICAS  # auto would pick Istio
    assert isvc.traffic is not None and isvc.traffic.percent == 30
    without = api.decode({**obj, "spec": {k: v for k, v in obj["spec"].items() if k != "routing"}})
    assert traffic.choose_router(without, CTX, served) is not base.Router.REPLICAS
