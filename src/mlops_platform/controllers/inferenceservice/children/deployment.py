"""The predictor Deployment ``<name>-predictor``: the model server pods.

Contract of :func:`build` (pure):
- container ``predictor`` with the runtime table's image (GPU variant when ``gpuPerReplica > 0``),
  command/args/env rendered for ``spec.port``, env ``MODEL_URI``, named ports (``http`` =
  ``spec.port``), readiness/liveness probes and a startup probe generous enough for model loading;
- resources from the model's resource requirements (any resource name); the runtime's default
  requests fill in a resource the spec sets neither a request nor a limit for (an HPA needs a CPU
  request); with GPUs (``nvidia.com/gpu``) the GPU image variant and a toleration for the usual
  GPU node taint; the runtime's ``nodeSelector`` and tolerations (before the GPU one);
- ``spec.replicas``: omitted when an autoscaler owns the count (:func:`base.replica_owner`) from
  the built object; :func:`settle` (run by the reconciler after hashing) then applies the LIVE
  count, so server-side apply neither fights the HPA nor removes the field (which would reset the
  Deployment to 1 replica); otherwise ``minReplicas`` (0 = scaled to zero);
- zero-downtime rollouts (maxSurge 25 %, maxUnavailable 0; a terminating pod serves on for the
  runtime's ``drain_seconds``, a preStop sleep, until load balancers have dropped it), a progress
  deadline longer than the startup probe's budget (a failed rollout becomes
  ``ProgressDeadlineExceeded``), no service links, no API token, non-root where the image supports
  it, no privilege escalation, no capabilities;
- the model at the runtime's ``model_dir``, per scheme of the component's model URI
  (:mod:`mlops_platform.api.modeluri`; ``docs/model-delivery.md``): ``s3``/``gs``/``http(s)``: an
  ``emptyDir`` filled by the init container ``storage-initializer`` (the operator's image, ``python
  -m mlops_platform.storage fetch``; the component's own URI, checksum and format; the storage
  Secret mounted into it alone), mounted read-only into the server; ``pvc``: the claim, read-only,
  at ``subPath`` = the URI's path; ``file``: nothing, ``{model_dir}`` renders to the URI's path;
- ``serviceAccountName`` when the InferenceService names one (workload identity for the bucket).

What a live Deployment says of its rollout (the model it serves, a replacement that is no rollout):
:mod:`~.deployment_rollout`.
"""

from __future__ import annotations

import dataclasses

from mlops_platform.api import internal, modeluri
from mlops_platform.controllers.inferenceservice import labels, servers
from mlops_platform.controllers.inferenceservice.children import base, deployment_rollout
from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.transport import resources

CONDITION = "DeploymentAvailable"
CONTAINER = "predictor"
MODEL_VOLUME = "model-store"
#: the init container that fetches a remote model into the model volume (``docs/model-delivery.md``)
STORAGE_INITIALIZER = "storage-initializer"
#: where the storage Secret is mounted in the initializer (``--credentials``), and its volume
CREDENTIALS_DIR = "/var/run/secrets/mlops.platform/storage"
CREDENTIALS_VOLUME = "storage-credentials"
#: the initializer's scratch space (its root filesystem is read-only)
SCRATCH_VOLUME = "storage-scratch"
SCRATCH_DIR = "/tmp"
#: the Secret's files: read-only, and readable by any uid, so the initializer reads them whichever
#: non-root uid the pod runs as (no fsGroup, which would also chown the model volume)
CREDENTIALS_MODE = 0o444
#: the initializer's uid when the runtime would run it as root (the operator image's USER)
STORAGE_INITIALIZER_UID = 65532
#: The initializer streams the artifact in bounded chunks (obstore), so its memory does not grow with
#: the model: a modest request, and a limit that bounds a misbehaving download at 512 MiB (Python,
#: obstore's buffers, an archive's decompression window) instead of letting it press the node. No
#: CPU limit: it would only slow the download, and nothing else of the pod runs meanwhile. Init
#: containers' requests do not add to the pod's: its effective request is the larger of the two.
STORAGE_INITIALIZER_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
STORAGE_INITIALIZER_LIMITS = {"memory": "512Mi"}
GPU_RESOURCE = internal.GPU_RESOURCE
KIND = kinds.Kind.of(resources.DEPLOYMENT)

name = base.component_name


def scale_target_ref(target: base.Target) -> base.Obj:
    """The component's Deployment as its autoscaler names it (the HPA's and the KEDA ScaledObject's
    ``spec.scaleTargetRef``)."""
    return {
        "apiVersion": resources.DEPLOYMENT.api_version,
        "kind": resources.DEPLOYMENT.kind,
        "name": name(target),
    }


def replicas(component: base.Component) -> int | None:
    """The component's replica count to apply; ``None`` when an autoscaler owns it."""
    owner = base.replica_owner(component)
    return component.min_replicas if owner is base.ReplicaOwner.OPERATOR else None


def build(target: base.Target, ctx: base.BuildContext) -> base.Obj:
    isvc = target.isvc
    rt = ctx.server(isvc)
    spec: base.Obj = {}
    count = replicas(target.component)
    if count is not None:
        spec["replicas"] = count
    spec |= {
        "selector": {"matchLabels": labels.selector(isvc, target.component.key)},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
        "revisionHistoryLimit": 5,
        "progressDeadlineSeconds": rt.progress_deadline_seconds,
        "template": {
            "metadata": {
                "labels": labels.child_labels(target, rt.server),
                "annotations": _pod_annotations(target, rt),
            },
            "spec": _pod_spec(target, rt, ctx),
        },
    }
    model = target.component.model_uri
    return {
        "apiVersion": resources.DEPLOYMENT.api_version,
        "kind": resources.DEPLOYMENT.kind,
        "metadata": base.metadata(target, ctx, name(target), {labels.MODEL_URI_ANNOTATION: model}),
        "spec": spec,
    }


def _pod_annotations(target: base.Target, rt: servers.ServingRuntime) -> dict[str, str]:
    out = {
        labels.MODEL_URI_ANNOTATION: target.component.model_uri,
        "kubectl.kubernetes.io/default-container": CONTAINER,
    }
    metrics_port = rt.ports.get("metrics")
    if rt.metrics_path and metrics_port is not None:
        out |= {"prometheus.io/scrape": "true", "prometheus.io/port": str(metrics_port)}
        out["prometheus.io/path"] = rt.metrics_path
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class _Delivery:
    """How the component's model reaches the server: its pod's volumes and init containers, the
    server's mount of the model, and the model directory the server is pointed at."""

    model_dir: str
    volumes: tuple[base.Obj, ...] = ()
    mounts: tuple[base.Obj, ...] = ()
    init_containers: tuple[base.Obj, ...] = ()


def _delivery(target: base.Target, rt: servers.ServingRuntime, ctx: base.BuildContext) -> _Delivery:
    """The wiring of the component's model URI, per scheme (see the module doc). A URI the parser
    refuses goes to the initializer, which refuses it with the parser's message: the pod then says
    ``ModelDownloadFailed`` instead of serving nothing (the API versions reject it first)."""
    uri = target.component.model_uri
    try:
        parsed: modeluri.ModelURI | None = modeluri.parse(uri)
    except modeluri.ModelURIError:
        parsed = None
    if parsed is not None and parsed.scheme == "file":
        return _Delivery(parsed.path)
    if parsed is not None and parsed.scheme == "pvc":
        volume = {
            "name": MODEL_VOLUME,
            "persistentVolumeClaim": {"claimName": parsed.location, "readOnly": True},
        }
        mount: base.Obj = {"name": MODEL_VOLUME, "mountPath": rt.model_dir, "readOnly": True}
        if parsed.path:
            mount["subPath"] = parsed.path
        return _Delivery(rt.model_dir, (volume,), (mount,))
    storage = target.component.storage
    volumes: list[base.Obj] = [
        {"name": MODEL_VOLUME, "emptyDir": {}},
        {"name": SCRATCH_VOLUME, "emptyDir": {}},
    ]
    if storage.secret_name:
        volumes.append(
            {
                "name": CREDENTIALS_VOLUME,
                "secret": {"secretName": storage.secret_name, "defaultMode": CREDENTIALS_MODE},
            }
        )
    mount = {"name": MODEL_VOLUME, "mountPath": rt.model_dir, "readOnly": True}
    return _Delivery(rt.model_dir, tuple(volumes), (mount,), (_storage_initializer(target, rt, ctx),))


def _storage_initializer(target: base.Target, rt: servers.ServingRuntime, ctx: base.BuildContext) -> base.Obj:
    """``python -m mlops_platform.storage fetch URI DIR ...`` (the contract: ``docs/model-delivery.md``)
    under the restricted Pod Security profile; its one-line failure is its termination message."""
    component, storage = target.component, target.component.storage
    args = ["fetch", component.model_uri, rt.model_dir, "--layout", rt.model_layout]
    args += ["--name", target.isvc.name]
    for flag, value in (
        ("--format", component.model_format),
        ("--sha256", component.model_sha256),
        ("--credentials", CREDENTIALS_DIR if storage.secret_name else None),
        ("--endpoint", storage.endpoint),
        ("--region", storage.region),
    ):
        if value:
            args += [flag, value]
    mounts: list[base.Obj] = [
        {"name": MODEL_VOLUME, "mountPath": rt.model_dir},
        {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR},
    ]
    if storage.secret_name:
        mounts.append({"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_DIR, "readOnly": True})
    security: base.Obj = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if rt.run_as_user == 0:  # a runtime run as root: the initializer still is not
        security["runAsUser"] = STORAGE_INITIALIZER_UID
    return {
        "name": STORAGE_INITIALIZER,
        "image": ctx.storage_initializer_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "mlops_platform.storage"],
        "args": args,
        "resources": {
            "requests": dict(STORAGE_INITIALIZER_REQUESTS),
            "limits": dict(STORAGE_INITIALIZER_LIMITS),
        },
        "securityContext": security,
        "volumeMounts": mounts,
        # the initializer writes its one-line failure there; never its logs (they may be long)
        "terminationMessagePolicy": "File",
    }


def _pod_spec(target: base.Target, rt: servers.ServingRuntime, ctx: base.BuildContext) -> base.Obj:
    security: base.Obj = {"seccompProfile": {"type": "RuntimeDefault"}}
    if rt.run_as_non_root:
        security["runAsNonRoot"] = True
    if rt.run_as_user is not None:
        security["runAsUser"] = rt.run_as_user
    delivery = _delivery(target, rt, ctx)
    pod: base.Obj = {}
    if target.isvc.service_account_name:
        pod["serviceAccountName"] = target.isvc.service_account_name
    pod |= {
        "enableServiceLinks": False,
        # no API token, also with a ServiceAccount: workload identity (IRSA, GKE) does not use it
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": rt.termination_grace_period_seconds,
        "securityContext": security,
    }
    if delivery.init_containers:
        pod["initContainers"] = [dict(c) for c in delivery.init_containers]
    pod["containers"] = [_container(target, rt, delivery)]
    if delivery.volumes:
        pod["volumes"] = [dict(v) for v in delivery.volumes]
    if rt.node_selector:
        pod["nodeSelector"] = dict(rt.node_selector)
    tolerations = [dict(t) for t in rt.tolerations]
    if target.isvc.resources.gpus > 0:
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    if tolerations:
        pod["tolerations"] = tolerations
    return pod


def _container(target: base.Target, rt: servers.ServingRuntime, delivery: _Delivery) -> base.Obj:
    isvc = target.isvc
    port = isvc.port
    values = rt.placeholders(port, isvc.name) | {"model_dir": delivery.model_dir}
    env = [{"name": "MODEL_URI", "value": target.component.model_uri}]
    env += [{"name": k, "value": servers.render(v, values)} for k, v in rt.env.items() if k != "MODEL_URI"]
    ports = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    ports += [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in rt.ports.items()]
    container: base.Obj = {"name": CONTAINER, "image": rt.image_for(isvc.resources.gpus)}
    if rt.command:
        container["command"] = [servers.render(c, values) for c in rt.command]
    container |= {
        "args": [servers.render(a, values) for a in rt.args],
        "env": env,
        "ports": ports,
        "readinessProbe": _probe(rt.readiness_probe, values),
        "livenessProbe": _probe(rt.liveness_probe, values),
        "startupProbe": _probe(rt.startup_probe, values),
    }
    compute = _resources(isvc, rt)
    if compute:
        container["resources"] = compute
    if rt.drain_seconds:  # keep serving until every load balancer has seen the endpoint go
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": rt.drain_seconds}}}
    container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if delivery.mounts:
        container["volumeMounts"] = [dict(m) for m in delivery.mounts]
    container |= {"imagePullPolicy": "IfNotPresent", "terminationMessagePolicy": "FallbackToLogsOnError"}
    return container


def _probe(p: servers.Probe, values: dict[str, str]) -> base.Obj:
    return {
        "httpGet": {"path": servers.render(p.path, values), "port": "http"},
        "periodSeconds": p.period_seconds,
        "timeoutSeconds": p.timeout_seconds,
        "failureThreshold": p.failure_threshold,
    }


def _resources(isvc: internal.InferenceService, rt: servers.ServingRuntime) -> base.Obj:
    requests = dict(isvc.resources.requests)
    limits = dict(isvc.resources.limits)
    for key, value in rt.default_requests.items():
        if key not in requests and key not in limits:  # a default request could exceed a set limit
            requests[key] = value
    return {k: v for k, v in (("requests", requests), ("limits", limits)) if v}


def condition(
    target: base.Target, ctx: base.BuildContext, desired: base.Obj | None, live: base.Obj | None
) -> base.ChildCondition:
    """``DeploymentAvailable``: can the predictor serve, and is a rollout going on or stuck?

    True while at least one replica is available. The Deployment's own ``Available`` condition is
    not used: with ``maxUnavailable: 0`` it turns False on every scale-up. Rollout progress follows
    ``kubectl rollout status``; a scale-up of a completed rollout is not a rollout.
    """
    if live is None:
        return base.not_found(CONDITION, KIND, name(target))
    spec, st = live.get("spec") or {}, live.get("status") or {}
    count = int(st.get("replicas") or 0)
    keda = base.replica_owner(target.component) is base.ReplicaOwner.KEDA
    if target.component.min_replicas == 0 and not (keda and int(spec.get("replicas") or 0) > 0):
        left = f"; {count} pod(s) still terminating" if count else ""
        return base.ChildCondition(
            CONDITION, "True", "ScaledToZero", f"minReplicas is 0: scaled to zero{left}"
        )
    want, updated = int(spec.get("replicas", 1)), int(st.get("updatedReplicas") or 0)
    ready = int(st.get("availableReplicas") or 0)
    serving: base.Status = "True" if ready > 0 else "False"
    generation = objects.generation(live)
    if int(st.get("observedGeneration") or 0) < generation:
        msg = f"waiting for the Deployment controller to observe generation {generation}"
        return base.ChildCondition(CONDITION, serving, "RollingOut", msg)
    progressing = objects.condition(live, "Progressing") or {}
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        msg = progressing.get("message") or "the rollout made no progress within progressDeadlineSeconds"
        return base.ChildCondition(CONDITION, "False", "ProgressDeadlineExceeded", msg)
    failure = objects.condition(live, "ReplicaFailure")  # e.g. quota or pod security refusals
    if failure is not None and failure.get("status") == "True":
        reason = failure.get("reason") or "ReplicaFailure"
        return base.ChildCondition(CONDITION, "False", reason, failure.get("message", ""))
    complete = progressing.get("reason", "NewReplicaSetAvailable") == "NewReplicaSetAvailable"
    rolling = None
    if updated < want:
        rolling = f"{updated} of {want} replicas updated"
    elif count > updated:
        rolling = f"{count - updated} old replica(s) pending termination"
    elif ready < updated and not complete:
        rolling = f"{ready} of {updated} updated replicas available"
    if rolling:
        return base.ChildCondition(CONDITION, serving, "RollingOut", rolling)
    summary = f"{ready}/{want} replicas available"
    if ready == 0:
        why = (objects.condition(live, "Available") or {}).get("message")
        return base.ChildCondition(
            CONDITION, "False", "NoReplicasAvailable", f"{summary}: {why}" if why else summary
        )
    reason = "ReplicasAvailable" if ready >= want else "PartiallyAvailable"
    return base.ChildCondition(CONDITION, "True", reason, summary)


RBAC = base.child_rbac(KIND, why="the predictor Deployment: watched (owns), applied, repaired, deleted")


def settle(target: base.Target, desired: base.Obj, live: base.Obj | None) -> None:
    """While an HPA owns the replica count, apply the live count instead of dropping the field.

    Dropping ``spec.replicas`` from our applied configuration would make server-side apply remove
    it (we owned it before the HPA existed) and the Deployment would fall back to 1 replica. Sending
    the current value never fights the HPA, and as it is set after hashing, HPA scaling alone causes
    no write. A new Deployment starts at ``minReplicas`` instead of the API default of 1.
    """
    spec = desired["spec"]
    if "replicas" not in spec:
        live_replicas = ((live or {}).get("spec") or {}).get("replicas")
        spec["replicas"] = live_replicas if live_replicas is not None else target.component.min_replicas


def fetch_options(deployment: base.Obj) -> tuple[str | None, str | None, internal.ModelStorage]:
    """The ``--sha256``, ``--format`` and storage (its Secret, ``--endpoint``, ``--region``) a live
    Deployment's storage initializer fetches with (None, None, no storage without one): what a
    canary that stays as it is keeps."""
    template = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in template.get("initContainers") or ():
        if container.get("name") != STORAGE_INITIALIZER:
            continue
        args = [str(a) for a in container.get("args") or ()]
        flags = ("--sha256", "--format", "--endpoint", "--region")
        found = {flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag in flags}
        secret = next(
            (
                str((v.get("secret") or {}).get("secretName"))
                for v in template.get("volumes") or ()
                if v.get("name") == CREDENTIALS_VOLUME and (v.get("secret") or {}).get("secretName")
            ),
            None,
        )
        storage = internal.ModelStorage(secret, found.get("--endpoint"), found.get("--region"))
        return found.get("--sha256"), found.get("--format"), storage
    return None, None, internal.ModelStorage()


CHILD = base.Child(
    "deployment",
    KIND,
    CONDITION,
    name,
    build,
    condition,
    contribute=deployment_rollout.contribute,
    settle=settle,
)
