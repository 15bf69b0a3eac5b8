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
  at ``subPath`` = the URI's path; ``file``: nothing, ``{model_dir}`` renders to the URI's path
  (:mod:`~.model_mount`);
- ``serviceAccountName`` when the InferenceService names one (workload identity for the bucket).

What a live Deployment says of its rollout (the model it serves, a replacement that is no rollout):
:mod:`~.deployment_rollout`.
"""

from __future__ import annotations

from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import labels, servers
from mlops_platform.controllers.inferenceservice.children import base, deployment_rollout, model_mount
from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.transport import resources

CONDITION = "DeploymentAvailable"
CONTAINER = "predictor"
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


def _pod_spec(target: base.Target, rt: servers.ServingRuntime, ctx: base.BuildContext) -> base.Obj:
    security: base.Obj = {"seccompProfile": {"type": "RuntimeDefault"}}
    if rt.run_as_non_root:
        security["runAsNonRoot"] = True
    if rt.run_as_user is not None:
        security["runAsUser"] = rt.run_as_user
    wiring = model_mount.wiring(target, rt, ctx)
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
    if wiring.init_containers:
        pod["initContainers"] = [dict(c) for c in wiring.init_containers]
    pod["containers"] = [_container(target, rt, wiring)]
    if wiring.volumes:
        pod["volumes"] = [dict(v) for v in wiring.volumes]
    if rt.node_selector:
        pod["nodeSelector"] = dict(rt.node_selector)
    tolerations = [dict(t) for t in rt.tolerations]
    if target.isvc.resources.gpus > 0:
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    if tolerations:
        pod["tolerations"] = tolerations
    return pod


def _container(target: base.Target, rt: servers.ServingRuntime, wiring: model_mount.Wiring) -> base.Obj:
    isvc = target.isvc
    port = isvc.port
    compute = _resources(isvc, rt)
    values = rt.placeholders(port, isvc.name, servers.cpu_workers(compute)) | {"model_dir": wiring.model_dir}
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
    if compute:
        container["resources"] = compute
    if rt.drain_seconds:  # keep serving until every load balancer has seen the endpoint go
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": rt.drain_seconds}}}
    container["securityContext"] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    if wiring.mounts:
        container["volumeMounts"] = [dict(m) for m in wiring.mounts]
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
