"""The InferenceService reconciler: level-based, idempotent, honest status.

One reconcile, from the CURRENT cached state of the InferenceService and its children:

1. decode the CR (bad input -> ``Ready=False/InvalidSpec``, a Warning Event, no retry);
2. for each child kind (``children.CHILDREN``, one pure builder module each): build the desired
   object; if it is not desired, delete the live one we own; if the live one already carries it
   (semantic subset compare + a hash of the desired object) do NOTHING, else server-side apply it
   (one field manager, ``force``) with a controller owner reference — so drift is repaired and
   steady state makes zero writes;
3. compute the status (per-child conditions, pod failures such as CrashLoopBackOff, Ready,
   Reconciled, replicas, url only while serving, the model version actually rolled out) and write
   it only when it changed (``lastReconcileTime`` moves only with such a write, so status writes
   never trigger further reconciles: the primary watch filters on generation);
4. emit an Event for every child create/update/delete and every failure, and one JSON log line
   with the generation, the computed diff per child, the actions and the duration.

API failures of a child are recorded on the status (``Reconciled=False`` with the HTTP reason, e.g.
``Forbidden``) and then raised, so the controller retries with backoff.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from mlops_platform import api
from mlops_platform.api import v1alpha1
from mlops_platform.controllers.inferenceservice import children, conditions, labels
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime import client as kclient
from mlops_platform.runtime import diff, events, resources
from mlops_platform.runtime import manager as rmanager
from mlops_platform.runtime.reconcile import Request, Result, TerminalError

log = logging.getLogger("mlops_platform.controllers.inferenceservice")
ISVC = api.RESOURCE
FIELD_MANAGER = labels.MANAGER
HASH_ANNOTATION = "mlops.platform/desired-hash"
POD_FAILURE_REASONS = frozenset(
    {
        "CrashLoopBackOff",
        "ImagePullBackOff",
        "ErrImagePull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "InvalidImageName",
        "RunContainerError",
    }
)
Obj = dict[str, Any]


POD_INDEX = "inferenceservice"


def pod_index(pod: Obj) -> list[str]:
    """Index pods by ``namespace/<InferenceService name>`` (from the label the predictor carries)."""
    meta = pod["metadata"]
    name = (meta.get("labels") or {}).get(labels.INFERENCESERVICE)
    return [f"{meta.get('namespace')}/{name}"] if name else []


class ChildApplyError(Exception):
    """One or more children could not be written; retried with backoff."""


class InferenceServiceReconciler:
    def __init__(self, mgr: rmanager.Manager, recorder: events.EventRecorder, ctx: base.BuildContext) -> None:
        self.mgr = mgr
        self.client = mgr.client
        self.cache = mgr.cache
        self.recorder = recorder
        self.ctx = ctx

    async def reconcile(self, request: Request) -> Result:
        raw = self.cache.get(ISVC, request.namespace, request.name)
        if raw is None or raw["metadata"].get("deletionTimestamp"):
            return Result()  # gone: the garbage collector removes the children
        started = time.perf_counter()
        try:
            isvc = v1alpha1.from_dict(raw)
            self._validate_runtime(isvc)
        except v1alpha1.ValidationError as e:
            await self._invalid(raw, str(e))
            raise TerminalError(f"invalid spec: {e}") from None

        actions: list[str] = []
        changes: dict[str, list[str]] = {}
        failures: list[tuple[str, kclient.ApiError]] = []
        observed: list[tuple[base.Child, Obj | None, Obj | None]] = []
        for child in children.CHILDREN:
            desired, live = await self._sync_child(child, isvc, raw, actions, changes, failures)
            observed.append((child, desired, live))

        for what, err in self._permission_problems(isvc.namespace):
            failures.append((what, err))
            self.recorder.event(raw, "Warning", "PermissionDenied", "Reconcile", f"{what}: {err}")
        status = self._status(isvc, raw, observed, failures)
        try:
            wrote_status = await self._write_status(raw, status)
        except kclient.ApiError as e:
            self.recorder.event(raw, "Warning", "StatusUpdateFailed", "UpdateStatus", f"patch status: {e}")
            raise
        all_actions = actions + (["status"] if wrote_status else [])
        log.log(
            logging.INFO if all_actions or failures else logging.DEBUG,
            "reconciled",
            extra={
                "generation": isvc.generation,
                "diff": changes,
                "actions": all_actions,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
            },
        )
        if failures:
            raise ChildApplyError("; ".join(f"{what}: {e}" for what, e in failures))
        return Result()

    def _validate_runtime(self, isvc: v1alpha1.InferenceService) -> None:
        """What only the runtime table can tell: spec.port must not be a port the server binds itself
        (e.g. Triton's gRPC 8001), or the pods could never start."""
        conflict = self.ctx.runtime(isvc).port_conflict(isvc.spec.port)
        if conflict:
            raise v1alpha1.ValidationError(f"spec.port: {conflict}")

    # -- children -----------------------------------------------------------------------------------

    async def _sync_child(
        self,
        child: base.Child,
        isvc: v1alpha1.InferenceService,
        raw: Obj,
        actions: list[str],
        changes: dict[str, list[str]],
        failures: list[tuple[str, kclient.ApiError]],
    ) -> tuple[Obj | None, Obj | None]:
        name = child.name(isvc)
        what = f"{child.resource.kind}/{name}"
        live = self.cache.get(child.resource, isvc.namespace, name)
        desired = child.build(isvc, self.ctx)
        if desired is None:
            if live is not None and _owned_by(live, isvc.uid):
                try:
                    await self.client.delete(
                        child.resource, name, isvc.namespace, propagation_policy="Background"
                    )
                except kclient.ApiError as e:
                    if not e.not_found:
                        self._failed(raw, what, "delete", e, failures)
                        return None, live
                actions.append(f"delete {what}")
                self.recorder.event(raw, "Normal", "Deleted", "Delete", f"{what} deleted: no longer desired")
            return None, None
        desired = _with_owner(desired, raw)
        annotations = desired["metadata"].setdefault("annotations", {})
        annotations[HASH_ANNOTATION] = diff.desired_hash(desired)
        if child.settle is not None:
            child.settle(isvc, desired, live)
        delta = ["(absent)"] if live is None else diff.differences(desired, live)
        if not delta:
            return desired, live
        changes[what] = delta
        try:
            applied = await self._apply_or_overwrite(child, desired, live)
        except kclient.ApiError as e:
            self._failed(raw, what, "apply", e, failures)
            return desired, live
        verb = "Created" if live is None else "Updated"
        actions.append(f"{verb.lower()[:-1]} {what}")
        note = f"{what} {verb.lower()}" + ("" if live is None else f": {', '.join(delta[:5])}")
        self.recorder.event(raw, "Normal", verb, "Create" if live is None else "Update", note)
        return desired, applied

    def _permission_problems(self, namespace: str) -> list[tuple[str, kclient.ApiError]]:
        """What the operator cannot see or record (a 403 on list/watch, or on writing Events)."""
        problems: list[tuple[str, kclient.ApiError]] = []
        watched = [resources.POD, *(c.resource for c in children.CHILDREN)]
        for group_resource, err in sorted(self.cache.errors(watched).items()):
            if isinstance(err, kclient.ApiError):
                problems.append((f"list/watch {group_resource}", err))
        denied = self.recorder.denied.get(namespace)
        if denied is not None:
            problems.append(("create events.events.k8s.io", denied))
        return problems

    async def _apply_or_overwrite(self, child: base.Child, desired: Obj, live: Obj | None) -> Obj:
        """Server-side apply; where hand edits by another manager survive it (list entries it added,
        or entries that now clash, e.g. two ports named "http"), overwrite exactly those paths."""
        try:
            applied = await self.client.apply(
                child.resource, desired, field_manager=FIELD_MANAGER, force=True
            )
        except kclient.ApiError as e:
            if live is None or e.status not in (409, 422):
                raise
            applied = live
        leftover = diff.difference_paths(desired, applied)
        if leftover:
            log.info(
                "overwriting fields other managers hold",
                extra={"paths": [diff.format_path(p) for p in leftover]},
            )
            applied = await self.client.replace(child.resource, diff.overwrite(applied, desired, leftover))
        return applied

    def _failed(
        self,
        raw: Obj,
        what: str,
        verb: str,
        e: kclient.ApiError,
        failures: list[tuple[str, kclient.ApiError]],
    ) -> None:
        failures.append((f"{verb} {what}", e))
        self.recorder.event(
            raw, "Warning", f"{verb.capitalize()}Failed", verb.capitalize(), f"{verb} {what}: {e}"
        )

    # -- status -------------------------------------------------------------------------------------

    def _status(
        self,
        isvc: v1alpha1.InferenceService,
        raw: Obj,
        observed: list[tuple[base.Child, Obj | None, Obj | None]],
        failures: list[tuple[str, kclient.ApiError]],
    ) -> Obj:
        previous = raw.get("status") or {}
        child_conds = [child.condition(isvc, desired, live) for child, desired, live in observed]
        # Ready means "can serve now": only children marked serving gate it
        serving_conds = [
            cond for (child, _, _), cond in zip(observed, child_conds, strict=True) if child.serving
        ]
        deployment = next((live for c, _, live in observed if c.resource == resources.DEPLOYMENT), None) or {}
        dep_status = deployment.get("status") or {}
        desired_replicas = int((deployment.get("spec") or {}).get("replicas") or 0)
        ready_replicas = int(dep_status.get("readyReplicas") or 0)
        pod_problem = self._pod_problem(isvc)

        if failures:
            what, err = failures[0]
            ready = ("False", "ReconcileFailed", f"{what}: {err.reason}: {err.message}")
            reconciled = (
                "False",
                f"{err.reason or 'ApiError'}",
                f"{what} failed: {err.status} {err.message}",
            )
        else:
            reconciled = ("True", "ChildrenApplied", f"children match generation {isvc.generation}")
            failing = next((c for c in serving_conds if c.status == "False"), None)
            if isvc.spec.min_replicas == 0:
                ready = ("False", "ScaledToZero", "minReplicas is 0: no replica is running")
            elif pod_problem is not None:
                ready = ("False", pod_problem[0], pod_problem[1])
            elif failing is not None:
                ready = ("False", failing.reason, failing.message)
            elif ready_replicas >= 1 and all(c.status == "True" for c in serving_conds):
                ready = ("True", "Serving", f"{ready_replicas}/{desired_replicas} replicas ready")
            else:
                ready = ("False", "Waiting", f"{ready_replicas}/{desired_replicas} replicas ready")
        wanted = [
            {"type": "Ready", "status": ready[0], "reason": ready[1], "message": ready[2]},
            {
                "type": "Reconciled",
                "status": reconciled[0],
                "reason": reconciled[1],
                "message": reconciled[2],
            },
            *(
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
                for c in child_conds
            ),
        ]
        serving = ready[0] == "True"
        status: Obj = {
            "observedGeneration": isvc.generation,
            "conditions": conditions.merge(
                previous.get("conditions") or [], wanted, generation=isvc.generation
            ),
            "replicas": int(dep_status.get("replicas") or 0),
            "readyReplicas": ready_replicas,
            "replicasSummary": f"{ready_replicas}/{desired_replicas}",
            "selector": labels.selector_string(isvc),
        }
        url = children.service.cluster_url(isvc, self.ctx.cluster_domain) if serving else None
        if url:
            status["url"] = url
        version = _rolled_out_model(deployment) if isvc.spec.min_replicas > 0 else None
        if version is None and isvc.spec.min_replicas > 0:
            version = previous.get("activeVersion")
        if version:
            status["activeVersion"] = version
        return status

    def _pod_problem(self, isvc: v1alpha1.InferenceService) -> tuple[str, str] | None:
        for pod in self.cache.by_index(resources.POD, POD_INDEX, f"{isvc.namespace}/{isvc.name}"):
            for cs in (pod.get("status") or {}).get("containerStatuses") or ():
                waiting = (cs.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in POD_FAILURE_REASONS:
                    msg = f"pod {pod['metadata']['name']} container {cs.get('name')}: {waiting['reason']}"
                    if waiting.get("message"):
                        msg += f": {waiting['message']}"
                    return str(waiting["reason"]), msg
        return None

    async def _write_status(self, raw: Obj, status: Obj) -> bool:
        previous = dict(raw.get("status") or {})
        previous.pop("lastReconcileTime", None)
        if previous == status:
            return False
        body = {
            "apiVersion": v1alpha1.API_VERSION,
            "kind": v1alpha1.KIND,
            "metadata": {"name": raw["metadata"]["name"], "namespace": raw["metadata"]["namespace"]},
            "status": {**status, "lastReconcileTime": conditions.now_rfc3339()},
        }
        await self.client.apply(ISVC, body, field_manager=FIELD_MANAGER, force=True, subresource="status")
        return True

    async def _invalid(self, raw: Obj, message: str) -> None:
        generation = int(raw["metadata"].get("generation") or 0)
        previous = raw.get("status") or {}
        wanted = [
            {"type": "Ready", "status": "False", "reason": "InvalidSpec", "message": message},
            {"type": "Reconciled", "status": "False", "reason": "InvalidSpec", "message": message},
        ]
        status = {
            **{k: v for k, v in previous.items() if k not in ("conditions", "lastReconcileTime", "url")},
            "observedGeneration": generation,
            "conditions": conditions.merge(previous.get("conditions") or [], wanted, generation=generation),
        }
        self.recorder.event(raw, "Warning", "InvalidSpec", "Validate", message)
        await self._write_status(raw, status)


def _owned_by(obj: Obj, uid: str) -> bool:
    return any(
        r.get("uid") == uid and r.get("controller") for r in obj["metadata"].get("ownerReferences") or ()
    )


def _with_owner(desired: Obj, raw: Obj) -> Obj:
    meta = desired.setdefault("metadata", {})
    meta["ownerReferences"] = [
        {
            "apiVersion": v1alpha1.API_VERSION,
            "kind": v1alpha1.KIND,
            "name": raw["metadata"]["name"],
            "uid": raw["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return desired


def _rolled_out_model(deployment: Obj) -> str | None:
    """The MODEL_URI of the Deployment's template once its rollout has fully completed."""
    if not deployment:
        return None
    spec, st = deployment.get("spec") or {}, deployment.get("status") or {}
    want = int(spec.get("replicas") or 0)
    complete = (
        int(st.get("observedGeneration") or 0) >= int(deployment["metadata"].get("generation") or 0)
        and want > 0
        and int(st.get("updatedReplicas") or 0) == want
        and int(st.get("replicas") or 0) == want
        and int(st.get("availableReplicas") or 0) == want
    )
    if not complete:
        return None
    for container in (spec.get("template") or {}).get("spec", {}).get("containers") or ():
        for env in container.get("env") or ():
            if env.get("name") == "MODEL_URI" and env.get("value"):
                return str(env["value"])
    return None
