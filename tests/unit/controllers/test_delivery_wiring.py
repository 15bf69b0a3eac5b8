"""Model delivery in the predictor Deployment (issue #14): what each model-URI scheme wires into the
pod (the storage initializer, the model volume, the storage Secret, the ServiceAccount), the canary
fetching its own model, and how a failed download reads on the status (``ModelDownloadFailed``).

The API versions do not spell the storage fields yet: the InferenceServices here are built directly
in the internal model. The complete objects are the ``delivery-*`` golden files (test_children).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, cast

import pytest

from mlops_platform.api import internal
from mlops_platform.cli import settings
from mlops_platform.controllers.inferenceservice import (
    canary_plan,
    labels,
    pod_problems,
    pods_and_slices,
    runtime_overrides,
    traffic,
)
from mlops_platform.controllers.inferenceservice.children import base, deployment, model_mount
from mlops_platform.deploy import defaults as deploy_defaults
from mlops_platform.deploy import manifests
from mlops_platform.deploy import rbac as deploy_rbac

Obj = dict[str, Any]
CTX = base.BuildContext()
SHA = "ab" * 32
STORAGE = internal.ModelStorage("s3-creds", "https://minio.example.com:9000", "eu-west-1")


def isvc(uri: str, framework: str = "triton", **fields: Any) -> internal.InferenceService:
    return internal.InferenceService("bert", "ml", "uid-1", 1, framework, uri, **fields)


def pod_spec(
    i: internal.InferenceService, ctx: base.BuildContext = CTX, component: base.Component | None = None
) -> Obj:
    comp = component or base.predictor(i)
    target = base.Target(i, comp, all_components=(base.predictor(i), comp))
    return cast(Obj, deployment.build(target, ctx)["spec"]["template"]["spec"])


def server(spec: Obj) -> Obj:
    [container] = spec["containers"]
    return cast(Obj, container)


def initializer(spec: Obj) -> Obj:
    [container] = spec["initContainers"]
    assert container["name"] == model_mount.STORAGE_INITIALIZER
    return cast(Obj, container)


def volumes(spec: Obj) -> dict[str, Obj]:
    return {v["name"]: v for v in spec.get("volumes") or ()}


# -- per scheme ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "framework", "layout"),
    [
        ("s3://models/bert/7/", "triton", "triton"),
        ("gs://models/iris/3/model.joblib", "seldon", "mlserver"),
        ("http://models.example.com/bert.mar", "torchserve", "torchserve"),
        ("https://models.example.com/a/b.tar.gz?sig=x", "triton", "triton"),
    ],
)
def test_a_remote_model_is_fetched_by_the_storage_initializer_into_an_empty_dir(
    uri: str, framework: str, layout: str
) -> None:
    spec = pod_spec(isvc(uri, framework))
    init = initializer(spec)
    assert init["image"] == base.DEFAULT_STORAGE_INITIALIZER_IMAGE == "mlops-platform:0.1.0"
    assert init["command"] == ["python", "-m", "mlops_platform.storage"]
    assert init["args"] == ["fetch", uri, "/mnt/models", "--layout", layout, "--name", "bert"]
    assert init["terminationMessagePolicy"] == "File"
    assert volumes(spec)[model_mount.MODEL_VOLUME] == {"name": "model-store", "emptyDir": {}}
    assert {"name": "model-store", "mountPath": "/mnt/models"} in init["volumeMounts"]
    # the server reads the model, never writes it
    assert server(spec)["volumeMounts"] == [
        {"name": "model-store", "mountPath": "/mnt/models", "readOnly": True}
    ]
    assert {"name": "MODEL_URI", "value": uri} in server(spec)["env"]  # rollout detection reads it


def test_the_initializer_meets_the_restricted_pod_security_profile_with_bounded_memory() -> None:
    spec = pod_spec(isvc("s3://models/bert/7"))
    init = initializer(spec)
    assert init["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert spec["securityContext"]["runAsNonRoot"] is True  # the pod's, as before
    assert init["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    }
    # a read-only root filesystem: its scratch space is an emptyDir of its own
    assert {"name": model_mount.SCRATCH_VOLUME, "mountPath": "/tmp"} in init["volumeMounts"]
    assert model_mount.SCRATCH_VOLUME not in str(server(spec))


def test_a_runtime_run_as_root_still_runs_the_initializer_as_non_root() -> None:
    table = runtime_overrides.load_overrides({"runtimes.yaml": "triton: {runAsUser: 0, runAsNonRoot: false}"})
    spec = pod_spec(isvc("s3://models/bert/7"), base.BuildContext(servers=table))
    assert spec["securityContext"]["runAsUser"] == 0
    assert initializer(spec)["securityContext"]["runAsUser"] == model_mount.STORAGE_INITIALIZER_UID == 65532


def test_the_initializer_takes_the_format_checksum_endpoint_and_region() -> None:
    i = isvc("s3://models/bert/7/model.onnx", model_format="onnx", model_sha256=SHA, storage=STORAGE)
    args = initializer(pod_spec(i))["args"]
    assert args[5:] == [
        "--name", "bert",
        "--format", "onnx",
        "--sha256", SHA,
        "--credentials", model_mount.CREDENTIALS_DIR,
        "--endpoint", "https://minio.example.com:9000",
        "--region", "eu-west-1",
    ]  # fmt: skip
    no_secret = dataclasses.replace(STORAGE, secret_name=None)
    args = initializer(pod_spec(dataclasses.replace(i, storage=no_secret)))["args"]
    assert "--credentials" not in args and "--endpoint" in args


def test_the_storage_secret_is_mounted_into_the_initializer_alone_and_never_read_into_env() -> None:
    spec = pod_spec(isvc("s3://models/bert/7", storage=STORAGE))
    assert volumes(spec)[model_mount.CREDENTIALS_VOLUME] == {
        "name": "storage-credentials",
        "secret": {"secretName": "s3-creds", "defaultMode": 0o444},  # readable by the non-root uid
    }
    mount = {"name": "storage-credentials", "mountPath": model_mount.CREDENTIALS_DIR, "readOnly": True}
    assert mount in initializer(spec)["volumeMounts"]
    assert "storage-credentials" not in str(server(spec))  # the model server never sees it
    text = str(spec)
    assert "secretKeyRef" not in text and "envFrom" not in text
    assert "env" not in initializer(spec)


def test_no_secret_means_no_secret_volume() -> None:
    spec = pod_spec(isvc("s3://models/bert/7"))
    assert set(volumes(spec)) == {model_mount.MODEL_VOLUME, model_mount.SCRATCH_VOLUME}


def test_the_service_account_is_the_pods_and_still_no_api_token_is_mounted() -> None:
    spec = pod_spec(isvc("s3://models/bert/7", service_account_name="bert-reader"))
    assert spec["serviceAccountName"] == "bert-reader"
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod_spec(isvc("s3://models/bert/7"))


@pytest.mark.parametrize(
    ("uri", "claim", "sub_path"),
    [("pvc://models/bert/7", "models", "bert/7"), ("pvc://models/bert/7/", "models", "bert/7"),
     ("pvc://models", "models", None), ("pvc://models/", "models", None)],
)  # fmt: skip
def test_a_claim_is_mounted_read_only_at_its_path_without_an_initializer(
    uri: str, claim: str, sub_path: str | None
) -> None:
    spec = pod_spec(isvc(uri, storage=STORAGE))
    assert "initContainers" not in spec
    assert list(volumes(spec).values()) == [
        {"name": "model-store", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
    ]
    mount = {"name": "model-store", "mountPath": "/mnt/models", "readOnly": True}
    assert server(spec)["volumeMounts"] == [mount | ({"subPath": sub_path} if sub_path else {})]


def test_a_file_uri_points_the_server_at_the_path_in_its_image() -> None:
    spec = pod_spec(isvc("file:///opt/models/iris", "seldon"))
    assert "initContainers" not in spec and "volumes" not in spec
    c = server(spec)
    assert "volumeMounts" not in c
    assert c["args"] == ["mlserver", "start", "/opt/models/iris"]
    assert {"name": "MLSERVER_MODELS_DIR", "value": "/opt/models/iris"} in c["env"]
    triton = server(pod_spec(isvc("file:///models/resnet")))
    assert "--model-repository=/models/resnet" in triton["args"]


def test_a_uri_the_parser_refuses_goes_to_the_initializer_which_says_so() -> None:
    """An unvalidated URI (one character bucket) never serves an empty model directory: the
    initializer parses it with the same parser and fails, ModelDownloadFailed says why."""
    assert initializer(pod_spec(isvc("s3://m/1")))["args"][1] == "s3://m/1"


def test_the_image_and_the_layout_follow_the_settings_and_the_runtime_table() -> None:
    table = runtime_overrides.load_overrides({"runtimes.yaml": "flat: {basedOn: triton, modelLayout: none}"})
    ctx = base.BuildContext(
        servers=table, storage_initializer_image="registry.example/ops/mlops-platform:0.1.0"
    )
    init = initializer(pod_spec(isvc("s3://models/bert/7", "flat"), ctx))
    assert init["image"] == "registry.example/ops/mlops-platform:0.1.0"
    assert init["args"][3:5] == ["--layout", "none"]


def test_a_model_dir_override_moves_the_mounts_and_the_initializers_destination() -> None:
    table = runtime_overrides.load_overrides({"runtimes.yaml": "seldon: {modelDir: /models}"})
    spec = pod_spec(isvc("gs://models/iris/3", "seldon"), base.BuildContext(servers=table))
    assert initializer(spec)["args"][2] == "/models"
    assert server(spec)["volumeMounts"][0]["mountPath"] == "/models"


# -- the canary fetches its own model --------------------------------------------------------------


def candidate(
    uri: str,
    sha256: str | None = None,
    fmt: str | None = None,
    storage: internal.ModelStorage | None = None,
) -> base.Component:
    return base.Component(
        labels.CANARY,
        uri,
        "Canary",
        1,
        1,
        model_sha256=sha256,
        model_format=fmt,
        storage=storage or internal.ModelStorage(),
    )


def test_the_canary_fetches_its_own_model_checksum_and_format_under_the_services_name() -> None:
    i = isvc("s3://models/bert/7/m.onnx", model_sha256=SHA, model_format="onnx", storage=STORAGE)
    staging = internal.ModelStorage("staging-creds", "https://staging.example:9000", "eu-north-1")
    spec = pod_spec(i, component=candidate("s3://models/bert/8/m.onnx", "cd" * 32, "onnx", staging))
    args = initializer(spec)["args"]
    assert args[:2] == ["fetch", "s3://models/bert/8/m.onnx"]
    assert args[args.index("--sha256") + 1] == "cd" * 32
    assert args[args.index("--name") + 1] == "bert"  # clients' request paths work on both
    # the component's own storage: its Secret, endpoint and region
    assert args[args.index("--endpoint") + 1] == "https://staging.example:9000"
    assert args[args.index("--region") + 1] == "eu-north-1"
    [secret] = [v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v]
    assert secret == "staging-creds"
    assert {"name": "MODEL_URI", "value": "s3://models/bert/8/m.onnx"} in server(spec)["env"]


def test_the_predictor_component_carries_the_predictors_checksum_and_format() -> None:
    comp = base.predictor(isvc("s3://models/bert/7", model_sha256=SHA, model_format="onnx"))
    assert (comp.model_sha256, comp.model_format) == (SHA, "onnx")


V7, V8 = "s3://models/bert/7/m.onnx", "s3://models/bert/8/m.onnx"


def test_a_staging_canary_takes_the_candidates_checksum_format_and_storage() -> None:
    own = internal.ModelStorage("staging-creds")
    t = internal.Traffic("8", 20, V8, model_format="onnx", model_sha256="cd" * 32, storage=own)
    i = isvc(V7, model_sha256=SHA, traffic=t, storage=STORAGE)
    r = traffic.rollout(i, CTX, base.Router.ISTIO, None, None, None, None, 0)
    assert r.plan.phase is canary_plan.Phase.STAGING
    assert (r.canary.model_uri, r.canary.model_sha256, r.canary.model_format) == (V8, "cd" * 32, "onnx")
    assert r.canary.storage == own
    assert r.components[0].storage == STORAGE  # the predictor keeps its own


def _ready_pod(uri: str) -> Obj:
    return {
        "metadata": {
            "name": "bert-canary-1",
            "labels": {labels.COMPONENT: labels.CANARY},
            "annotations": {labels.MODEL_URI_ANNOTATION: uri},
        },
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_a_leaving_canary_keeps_what_its_live_deployment_fetches() -> None:
    """Rolled back (no canary in the spec) while the route still gives it traffic: the canary stays
    as it is, checksum included, so it is not rolled out again while it may serve."""
    built = pod_spec(isvc(V7), component=candidate(V8, "cd" * 32, "onnx"))
    live = {
        "metadata": {"annotations": {labels.MODEL_URI_ANNOTATION: V8}},
        "spec": {"replicas": 1, "template": {"spec": built}},
    }
    assert model_mount.fetch_options(live) == ("cd" * 32, "onnx", internal.ModelStorage())
    with_storage = pod_spec(isvc(V7), component=candidate(V8, "cd" * 32, "onnx", STORAGE))
    live_with = {"spec": {"template": {"spec": with_storage}}}
    assert model_mount.fetch_options(live_with) == ("cd" * 32, "onnx", STORAGE)
    weights = {canary_plan.STABLE_KEY: 80, canary_plan.CANARY_KEY: 20}
    i = isvc(V7, model_sha256=SHA)
    r = traffic.rollout(i, CTX, base.Router.ISTIO, None, live, None, weights, 1, [_ready_pod(V8)])
    assert (r.plan.phase, r.plan.canary) == (canary_plan.Phase.ROLLING_BACK, canary_plan.CanaryAction.KEEP)
    assert (r.canary.model_uri, r.canary.model_sha256, r.canary.model_format) == (V8, "cd" * 32, "onnx")
    assert model_mount.fetch_options({}) == (None, None, internal.ModelStorage())


# -- the operator's settings and permissions -------------------------------------------------------


def test_the_default_initializer_image_is_the_operators_own_image() -> None:
    assert base.DEFAULT_STORAGE_INITIALIZER_IMAGE == settings.DEFAULT_STORAGE_INITIALIZER_IMAGE
    assert base.DEFAULT_STORAGE_INITIALIZER_IMAGE == manifests.DEFAULT_IMAGE


@pytest.mark.parametrize("image", [manifests.DEFAULT_IMAGE, "registry.example/ops/mlops-platform:0.1.0"])
def test_the_install_passes_the_operators_image_to_the_initializer(image: str) -> None:
    objs = manifests.install_objects(image=image)
    deployments = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    [container] = deployments["mlops-platform"]["spec"]["template"]["spec"]["containers"]
    assert container["image"] == image
    assert f"--storage-initializer-image={image}" in container["args"]
    [activator] = deployments["mlops-activator"]["spec"]["template"]["spec"]["containers"]
    assert activator["image"] == image  # the activator is the operator's image too


def test_the_operator_needs_no_secret_permission_for_model_credentials() -> None:
    """The pods mount the storage Secret; the operator never reads one. Its only Secret rules are
    the conversion webhook's, in its own namespace (the leader-election Role)."""
    objs = deploy_rbac.objects()
    for o in objs:
        rules = o.get("rules") or ()
        secret_rules = [r for r in rules if "secrets" in r.get("resources", ())]
        if o["kind"] == "ClusterRole":
            assert not secret_rules, o["metadata"]["name"]
        elif secret_rules:
            assert o["kind"] == "Role" and o["metadata"]["namespace"] == deploy_defaults.DEFAULT_NAMESPACE
            for r in secret_rules:
                assert r["verbs"] == ["create"] or r.get("resourceNames") == [deploy_defaults.WEBHOOK_SECRET]


# -- readiness: a failed download ---------------------------------------------------------------------

MESSAGE = "model download failed: 403 Forbidden: s3://models/bert/7/m.onnx"


def init_pod(state: Obj, last: Obj | None = None, *, name: str = "bert-predictor-7d9f-abcde") -> Obj:
    """A pod whose storage initializer is in ``state`` (its last termination ``last``), the server
    waiting for it, as the kubelet reports it."""
    init: Obj = {"name": model_mount.STORAGE_INITIALIZER, "ready": False, "restartCount": 3, "state": state}
    if last is not None:
        init["lastState"] = {"terminated": last}
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": "u",
            "labels": {labels.INFERENCESERVICE: "bert"},
        },
        "spec": {"initContainers": [{"name": model_mount.STORAGE_INITIALIZER, "image": "x" * 300}]},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "Initialized", "status": "False", "reason": "ContainersNotInitialized"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            ],
            "initContainerStatuses": [init],
            "containerStatuses": [
                {"name": "predictor", "ready": False, "state": {"waiting": {"reason": "PodInitializing"}}}
            ],
        },
    }


FAILED = {
    "exitCode": 1,
    "reason": "Error",
    "message": f"{MESSAGE}\n",
    "startedAt": "2026-01-01T00:00:00Z",
    "finishedAt": "2026-01-01T00:00:01Z",
    "containerID": "containerd://" + "f" * 64,
}
INIT_ERROR = init_pod({"terminated": FAILED})
INIT_CRASHLOOP = init_pod(
    {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}, FAILED
)
WANT = ("ModelDownloadFailed", f"pod bert-predictor-7d9f-abcde: {MESSAGE}")


INIT_RETRYING = init_pod({"running": {"startedAt": "2026-01-01T00:00:02Z"}}, FAILED)


@pytest.mark.parametrize(
    "pod",
    [INIT_ERROR, INIT_CRASHLOOP, INIT_RETRYING],
    ids=["Init:Error", "Init:CrashLoopBackOff", "retrying after a failed run"],
)
def test_a_failed_download_is_model_download_failed_with_the_initializers_line(pod: Obj) -> None:
    slim = pods_and_slices.slim_pod(copy.deepcopy(pod))
    assert pod_problems.pod_problem([pod]) == pod_problems.pod_problem([slim]) == WANT
    assert pods_and_slices.pod_failure(slim) == WANT
    assert "startedAt" not in str(slim) and "containerID" not in str(slim) and "spec" not in slim


def test_the_pod_signal_changes_when_the_download_fails_and_not_when_it_is_retried() -> None:
    running = init_pod({"running": {"startedAt": "2026-01-01T00:00:00Z"}})
    signals = [
        pods_and_slices.pod_signal(pods_and_slices.slim_pod(copy.deepcopy(p))) for p in (running, INIT_ERROR)
    ]
    assert signals[0] is None and signals[1] == WANT  # the watch enqueues a reconcile
    again = pods_and_slices.pod_signal(pods_and_slices.slim_pod(copy.deepcopy(INIT_CRASHLOOP)))
    assert again == signals[1]  # a restart of the same failure: no status churn


def test_a_canary_pods_failed_download_is_its_signal_too() -> None:
    pod = copy.deepcopy(INIT_ERROR)
    pod["metadata"]["labels"][labels.COMPONENT] = labels.CANARY
    failure, _, _ = cast(tuple[Any, Any, Any], pods_and_slices.pod_signal(pods_and_slices.slim_pod(pod)))
    assert failure == WANT


def test_a_download_in_progress_or_done_is_no_problem() -> None:
    running = init_pod({"running": {"startedAt": "2026-01-01T00:00:00Z"}})
    done = init_pod({"terminated": {"exitCode": 0, "reason": "Completed"}})
    for pod in (running, done):
        assert pod_problems.pod_problem([pods_and_slices.slim_pod(copy.deepcopy(pod))]) is None


def test_without_a_termination_message_the_exit_code_is_said_and_long_messages_are_bounded() -> None:
    bare = init_pod({"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
    assert pod_problems.pod_problem([pods_and_slices.slim_pod(bare)]) == (
        "ModelDownloadFailed",
        "pod bert-predictor-7d9f-abcde: the storage initializer exited with code 137 (OOMKilled)",
    )
    long = init_pod({"terminated": {"exitCode": 1, "message": "x" * 4096}})
    slim = pods_and_slices.slim_pod(copy.deepcopy(long))
    _, message = pod_problems.pod_problem([slim]) or ("", "")
    assert len(message) == pod_problems.MAX_UPSTREAM_MESSAGE and message.endswith("…")
    assert len(str(slim)) < 1200  # the cache keeps a bounded message


def test_an_initializer_image_that_cannot_be_pulled_says_so() -> None:
    pull = init_pod({"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}})
    assert pod_problems.pod_problem([pods_and_slices.slim_pod(pull)]) == (
        "ImagePullBackOff",
        "pod bert-predictor-7d9f-abcde init container storage-initializer: ImagePullBackOff: "
        "Back-off pulling image",
    )
