"""The InferenceService reconciler: level-based, idempotent, honest status.

One reconcile (:meth:`InferenceServiceReconciler.reconcile`), from the CURRENT cached state of the
InferenceService and its children:

1. read the CR (or our status write's answer while the cache is older: :mod:`.own_writes`) and
   decode it into the internal model (bad input -> ``Ready=False/InvalidSpec`` naming the field, a
   Warning Event, no retry);
2. decide the rollout (:func:`traffic.decide`) and the slots it gives (:func:`base.slots`: every
   child kind for every component); with the pods' failures (:mod:`.pods_and_slices`) and what
   cannot be read or recorded, these are the reconcile's inputs: inputs an earlier reconcile
   settled (:mod:`.settled_inputs`) are not decided again;
3. sync the children (:mod:`.slot_sync`): for each slot build the desired object; resolve the
   kind's served version (an optional kind whose CRD is absent is skipped and reported,
   ``CRDNotInstalled``); then the generic engine (:mod:`~mlops_platform.runtime.control.childsync`)
   deletes a child no longer desired, or applies a desired one only when the live one does not
   already carry it (semantic subset compare + a hash) — so drift is repaired and steady state
   makes zero writes; ONE Event per reconcile that wrote children, listing each child created,
   updated (with the differing paths) or deleted, and a Warning Event per failure;
4. compute the status (:mod:`.status`: per-slot conditions, pod failures such as CrashLoopBackOff,
   Ready, Reconciled, replicas, url only while serving, the model version actually rolled out) and
   write it only when it changed (status writes never trigger reconciles: the primary watch
   filters on generation);
5. record: one JSON log line with the generation, the computed diff per child, the actions and the
   duration; then the inputs are settled, or the reconcile requeues or raises.

The child writes of one reconcile go out in parallel (they are independent); their outcomes are
recorded in slot order, so status, Event and log line do not depend on which answer came first.

API failures of a child are recorded on the status (``Reconciled=False`` with the HTTP reason, e.g.
``Forbidden``) and then raised, so the controller retries with backoff.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TypeGuard

from mlops_platform import api
from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import (
    analysis_measure,
    analysis_run,
    children,
    conditions,
    labels,
    own_writes,
    pods_and_slices,
    servers,
    settled_inputs,
    slot_sync,
    status,
    traffic,
)
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.caching import crdwatch, kinds
from mlops_platform.runtime.control import childsync
from mlops_platform.runtime.control.reconcile import Request, Result, TerminalError
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.observability import events
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

log = logging.getLogger("mlops_platform.controllers.inferenceservice")
ISVC = api.RESOURCE
HASH_ANNOTATION = "mlops.platform/desired-hash"


def denied(error: Exception | None) -> TypeGuard[rclient.ApiError]:
    """Whether a list/watch error is one the InferenceServices report (401 or 403: RBAC or
    credentials); any other is transient and retried by the informer."""
    return isinstance(error, rclient.ApiError) and error.status in (401, 403)


class ReconcileError(Exception):
    """The reconcile could not complete (a child write, a list/watch or an Event write failed); the
    failures are on the status first, then this is raised so the controller retries with backoff."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Basis:
    """What one reconcile decides from: the CR as read and decoded, the rollout planned and the
    slots it gives, the pods' failures, what cannot be read or recorded, and all of it as the
    memo's inputs (:meth:`InferenceServiceReconciler._inputs`)."""

    key: settled_inputs.Key
    raw: Obj
    isvc: internal.InferenceService
    plan: traffic.Rollout
    slots: list[base.Slot]
    pod_failure: tuple[str, str] | None
    canary_failure: tuple[str, str] | None
    problems: list[tuple[str, rclient.ApiError]]
    inputs: tuple[object, ...]
    #: the canary analysis' decision, and the InferenceService as the builders see it (``built``)
    progress: analysis_run.Progress

    @property
    def built(self) -> internal.InferenceService:
        return self.progress.isvc


class InferenceServiceReconciler:
    def __init__(
        self,
        cache: rcache.Cache,
        client: rclient.Client,
        recorder: slot_sync.Recorder | events.EventRecorder,
        optional_kinds: crdwatch.OptionalKinds,
        ctx: base.BuildContext,
        analysis: analysis_run.AnalysisRun | None = None,
    ) -> None:
        self.cache = cache
        self.client = client
        self.recorder = recorder
        self.kinds = optional_kinds
        self.ctx = ctx
        self.syncer = childsync.ChildSyncer(
            client, field_manager=labels.MANAGER, hash_annotation=HASH_ANNOTATION, shape_of=cache.shape_of
        )
        #: the watch filter of owned kinds that drops the echoes of our own writes
        self.own_writes = own_writes.OwnWrites()
        #: the primary kind's predicate that keeps our status writes until the cache holds them
        self.own_status = own_writes.OwnStatus()
        #: decides every slot of a reconcile and writes what differs
        self.slot_sync = slot_sync.SlotSync(
            cache, optional_kinds, ctx, self.syncer, recorder, self.own_writes
        )
        #: per InferenceService, the inputs under which its last reconcile's decisions hold
        self.settled = settled_inputs.SettledInputs()
        #: the canary analyses (issue 42); without a Prometheus client every measurement holds
        self.analysis = analysis or analysis_run.AnalysisRun(analysis_measure.Measurer(None))

    async def reconcile(self, request: Request) -> Result:
        key = (request.namespace or "", request.name)
        raw = self._read(request, key)
        if raw is None:
            return Result()  # gone: the garbage collector removes the children
        started = time.perf_counter()
        isvc = await self._decode(key, raw)
        dialect = self.ctx.server(isvc).metrics_dialect
        progress = self.analysis.run(key, raw, isvc, self._rollout, dialect)
        built = progress.isvc  # the spec as the canary analysis' status has it built (analysis_run)
        plan = self._rollout(built)
        slots = base.slots(built, children.CHILDREN, plan.components, plan.route)
        basis = self._basis(key, raw, isvc, plan, slots, progress)
        if self.settled.holds(key, basis.inputs):
            # the inputs of a reconcile that found nothing to write: nothing to do but the analysis' clock
            return progress.result(Result())
        run = await self.slot_sync.sync(raw, built, slots)
        after = self._rollout(built, run.written_objects())  # the rollout as our writes left it
        written = await self._write_status(basis, run, after)
        self._log(run, written, started)
        return progress.result(self._settle(basis, run, after, written))

    # -- read and decide ----------------------------------------------------------------------------

    def _read(self, request: Request, key: settled_inputs.Key) -> Obj | None:
        """The CR from the cache, or our status write's answer while the cache is older than it
        (:meth:`own_writes.OwnStatus.read`); None when it is gone or being deleted."""
        raw = self.cache.get(ISVC, request.namespace, request.name)
        if raw is None or objects.deleting(raw):
            self.settled.forget(key)
            self.analysis.measurer.forget(key)
            return None
        return self.own_status.read(raw)

    async def _decode(self, key: settled_inputs.Key, raw: Obj) -> internal.InferenceService:
        """The CR in the internal model: the settled one at the same resourceVersion (decoded
        already), else decoded and checked against what only the runtime table can tell
        (:func:`servers.validate`: the runtime exists, serves the declared model formats, does not
        bind the port itself) before any builder runs, so none meets a runtime the table lacks. An
        invalid spec is written on the status and an Event, and not retried (TerminalError)."""
        settled = self.settled.decoded(key, objects.meta(raw).get("resourceVersion"))
        if settled is not None:
            return settled
        try:
            isvc = api.decode(raw)
            servers.validate(isvc, self.ctx.servers)
        except api.ValidationError as e:
            self.settled.forget(key)
            await self._invalid(raw, str(e))
            raise TerminalError(f"invalid spec: {e}") from None
        return isvc

    def _basis(
        self,
        key: settled_inputs.Key,
        raw: Obj,
        isvc: internal.InferenceService,
        plan: traffic.Rollout,
        slots: list[base.Slot],
        progress: analysis_run.Progress,
    ) -> _Basis:
        """The rest of what the reconcile decides from, from the cache: the pods' failures and what
        cannot be read or recorded; and all of it as inputs."""
        pods = self.cache.by_index(resources.POD, pods_and_slices.POD_INDEX, isvc.key)
        pod_failure, canary_failure = pods_and_slices.failures(pods)
        problems = self._permission_problems(isvc.namespace)
        version = objects.meta(raw).get("resourceVersion")
        observed = (pod_failure, canary_failure, plan, progress.inputs())
        inputs = self._inputs(version, slots, observed, problems)
        return _Basis(key, raw, isvc, plan, slots, pod_failure, canary_failure, problems, inputs, progress)

    def _inputs(
        self,
        cr_version: str | None,
        slots: list[base.Slot],
        observed: tuple[object, ...],
        problems: list[tuple[str, rclient.ApiError]],
        run: slot_sync.Run | None = None,
    ) -> tuple[object, ...]:
        """Everything a reconcile decides from: the CR's resourceVersion (spec, labels, status), for
        each slot the kind's served version and the live child's resourceVersion (from the cache,
        or as ``run``'s writes left them: :meth:`slot_sync.SlotSync.versions`), what else was
        observed (the pods' failures, the rollout decided from the canary's endpoints), and what
        cannot be read or recorded. The builders are pure and the settings fixed, so equal inputs
        give equal decisions."""
        versions = self.slot_sync.versions(slots, run)
        return (cr_version, observed, *versions, tuple((what, str(err)) for what, err in problems))

    def _rollout(
        self,
        isvc: internal.InferenceService,
        answered: dict[tuple[str, str], Obj | None] | None = None,
    ) -> traffic.Rollout:
        """The canary decision (:func:`traffic.decide`) from the cache, or from the objects this
        reconcile's writes ``answered`` with (by plural and name) where it wrote: the rollout as the
        cluster now shows it (a route just rewritten, a canary just created or deleted). The status
        reports that split; the next reconcile, reading our writes back, starts from it."""
        ns = isvc.namespace

        def live(kind: kinds.Kind, name: str) -> Obj | None:
            resource = self._served(kind) if kind.optional else kind.resource()
            if resource is None:
                return None
            if answered is not None and (resource.plural, name) in answered:
                return answered[(resource.plural, name)]
            return self.cache.get(resource, ns, name)

        def endpoints() -> int:
            slices = self.cache.by_index(resources.ENDPOINT_SLICE, pods_and_slices.POD_INDEX, isvc.key)
            return sum(pods_and_slices.ready_endpoints(s) for s in slices)

        return traffic.decide(
            isvc,
            self.ctx,
            lambda kind: self._served(kind) is not None,
            live,
            endpoints,
            lambda: self.cache.by_index(resources.POD, pods_and_slices.POD_INDEX, isvc.key),
        )

    def _served(self, kind: kinds.Kind) -> rclient.Resource | None:
        """The served version of an optional kind once its informer has listed, else None."""
        resource = self.kinds.resolve(kind)
        return resource if resource is not None and self.cache.synced(resource) else None

    def _permission_problems(self, namespace: str) -> list[tuple[str, rclient.ApiError]]:
        """What the operator cannot see or record (a 401/403 on list/watch, or on writing Events).

        Any other list/watch error is transient (a restarting API server answers 503, then 429 while
        its watch cache fills, then 410): the informer retries it and the cache is served meanwhile,
        so it fails no reconcile (each failure would grow the key's backoff past the outage)."""
        problems: list[tuple[str, rclient.ApiError]] = []
        watched = [resources.POD, resources.ENDPOINT_SLICE, resources.CRD]
        watched += [r for c in children.CHILDREN if (r := self.kinds.resolve(c.kind)) is not None]
        for group_resource, err in sorted(self.cache.errors(watched).items()):
            if denied(err):
                problems.append((f"list/watch {group_resource}", err))
        refused = self.recorder.denied.get(namespace)
        if refused is not None:
            problems.append(("create events.events.k8s.io", refused))
        return problems

    # -- status and record --------------------------------------------------------------------------

    async def _write_status(self, basis: _Basis, run: slot_sync.Run, after: traffic.Rollout) -> Obj | None:
        """The status (:func:`status.compute`) from the slots as synced, the rollout ``after`` our
        writes and what cannot be read or recorded (a failure each, and a Warning Event), applied
        when it changed: the answer (the CR as stored), or None if unchanged. A failed status write
        is a Warning Event, then raised."""
        raw = basis.raw
        for what, err in basis.problems:
            run.failures.append(status.Failure(what, err))
            self.recorder.event(raw, "Warning", "PermissionDenied", "Reconcile", f"{what}: {err}")
        new_status = status.compute(
            basis.built,
            raw.get("status") or {},
            run.observed,
            run.failures,
            basis.pod_failure,
            self.ctx,
            status.Canary(after, basis.canary_failure),
        )
        basis.progress.apply(new_status, raw.get("status") or {})
        sent = time.perf_counter()
        try:
            written = await self._apply_status(raw, new_status)
        except rclient.ApiError as e:
            self.recorder.event(raw, "Warning", "StatusUpdateFailed", "UpdateStatus", f"patch status: {e}")
            raise
        if written is not None:
            run.request_ms["status"] = round((time.perf_counter() - sent) * 1000, 1)
            event = basis.progress.event()
            if event is not None:  # the analysis' transition, once its status is written
                self.recorder.event(raw, event[0], event[1], "Analysis", event[2])
        return written

    async def _apply_status(self, raw: Obj, new: Obj) -> Obj | None:
        """Apply the status when it changed; the answer (the CR as stored), or None if unchanged."""
        previous = dict(raw.get("status") or {})
        previous.pop("lastReconcileTime", None)
        if previous == new:
            return None
        body = {
            "apiVersion": raw.get("apiVersion", ISVC.api_version),
            "kind": raw.get("kind", ISVC.kind),
            "metadata": {"name": objects.name(raw), "namespace": objects.namespace(raw)},
            "status": {**new, "lastReconcileTime": conditions.now_rfc3339()},
        }
        answer = await self.client.apply(
            ISVC,
            body,
            field_manager=labels.MANAGER,
            force=True,
            subresource="status",
            shape=self.cache.shape_of(ISVC),  # the answer stands in for the cached object (own_status)
        )
        self.own_status.wrote(raw, answer)
        return answer

    async def _invalid(self, raw: Obj, message: str) -> None:
        self.recorder.event(raw, "Warning", "InvalidSpec", "Validate", message)
        await self._apply_status(raw, status.invalid(raw, message))

    def _log(self, run: slot_sync.Run, written: Obj | None, started: float) -> None:
        """The reconcile's JSON log line: INFO when it wrote or failed, else DEBUG."""
        all_actions = run.actions + (["status"] if written is not None else [])
        log.log(
            logging.INFO if all_actions or run.failures else logging.DEBUG,
            "reconciled",
            extra={
                "generation": run.isvc.generation,
                "diff": run.changes,
                "actions": all_actions,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                "requests_ms": run.request_ms,
            },
        )

    def _settle(
        self, basis: _Basis, run: slot_sync.Run, after: traffic.Rollout, written: Obj | None
    ) -> Result:
        """How the reconcile ends: failures raised (:class:`ReconcileError`, after the status says
        them), a requeue when our own writes changed the rollout, else the inputs our writes left
        settled when the status landed on the generation decided from. Anything but settling forgets
        (the invariant of :class:`settled_inputs.SettledInputs`)."""
        key = basis.key
        if run.failures:
            self.settled.forget(key)
            raise ReconcileError("; ".join(f"{f.what}: {f.error}" for f in run.failures))
        if (after.components, after.route) != (basis.plan.components, basis.plan.route):
            # our own writes changed what to decide (the route now gives a leaving canary nothing, so
            # it can go): decide again now; those writes' echoes are filtered from the watch
            self.settled.forget(key)
            return Result(requeue=True)
        answer = written or basis.raw
        if objects.generation(answer) != basis.isvc.generation:
            # the status landed on a newer spec than the one decided from: its version must not
            # be settled with this decode (the spec event's reconcile would find "nothing new")
            self.settled.forget(key)
            return Result()
        # what the next reconcile will read once the watches deliver our writes: the objects our
        # writes answered with. Deciding from those gives nothing to write (every write made the
        # cluster carry what was decided), so that is settled too; the echo filter drops those
        # events, and anything else that changes (a controller's status) is a new input.
        version = objects.meta(answer).get("resourceVersion")
        observed = (basis.pod_failure, basis.canary_failure, after, basis.progress.inputs())
        inputs = self._inputs(version, basis.slots, observed, basis.problems, run)
        self.settled.settle(key, inputs, basis.isvc)
        return Result()
