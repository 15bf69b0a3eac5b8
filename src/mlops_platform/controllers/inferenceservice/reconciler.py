"""The InferenceService reconciler: level-based, idempotent, honest status.

One reconcile, from the CURRENT cached state of the InferenceService and its children:

1. decode the CR into the internal model (bad input -> ``Ready=False/InvalidSpec`` naming the
   field, a Warning Event, no retry);
2. for each slot (:func:`base.slots`: every child kind for every component): build the desired
   object; resolve the kind's served version (an optional kind whose CRD is absent is skipped and
   reported, ``CRDNotInstalled``); then the generic engine (:mod:`~mlops_platform.runtime.control.childsync`)
   deletes a child no longer desired, or applies a desired one only when the live one does not
   already carry it (semantic subset compare + a hash) — so drift is repaired and steady state
   makes zero writes;
3. compute the status (:mod:`.status`: per-slot conditions, pod failures such as CrashLoopBackOff,
   Ready, Reconciled, replicas, url only while serving, the model version actually rolled out) and
   write it only when it changed (status writes never trigger reconciles: the primary watch
   filters on generation);
4. emit ONE Event per reconcile that wrote children, listing each child created, updated (with the
   differing paths) or deleted, a Warning Event per failure, and one JSON log line with the
   generation, the computed diff per child, the actions and the duration.

The child writes of one reconcile go out in parallel (they are independent); their outcomes are
recorded in slot order, so status, Event and log line do not depend on which answer came first.

API failures of a child are recorded on the status (``Reconciled=False`` with the HTTP reason, e.g.
``Forbidden``) and then raised, so the controller retries with backoff.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Literal, Protocol

from mlops_platform import api
from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import (
    children,
    conditions,
    labels,
    own_writes,
    pods_and_slices,
    servers,
    settled_inputs,
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
# read by `why` from here until it reads them where they live (pods_and_slices)
CANARY_SLICES = pods_and_slices.CANARY_SLICES
ready_endpoints = pods_and_slices.ready_endpoints


class ReconcileError(Exception):
    """The reconcile could not complete (a child write, a list/watch or an Event write failed); the
    failures are on the status first, then this is raised so the controller retries with backoff."""


class Recorder(Protocol):
    denied: dict[str, rclient.ApiError]

    def event(self, regarding: Obj, type_: str, reason: str, action: str, note: str) -> None: ...


@dataclasses.dataclass
class _Run:
    """What one reconcile did so far (for the status, the log line and the Events)."""

    raw: Obj
    isvc: internal.InferenceService
    actions: list[str] = dataclasses.field(default_factory=list)
    changes: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    failures: list[status.Failure] = dataclasses.field(default_factory=list)
    observed: list[status.Observed] = dataclasses.field(default_factory=list)
    #: (action, "Kind/name", changed paths) of every child written, in slot order (for the Event)
    done: list[tuple[str, str, tuple[str, ...]]] = dataclasses.field(default_factory=list)
    #: "Kind/name" (or "status") -> milliseconds its write took, request to answer (an apply the
    #: server refused and the replace after it: both), for the log line: what of a slow reconcile
    #: was the API server's and what the operator's own
    request_ms: dict[str, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class _Decision:
    """One slot decided from the cache, before any request: its desired object (None: not wanted),
    the live child, and the paths to write (none: it carries them)."""

    slot: base.Slot
    resource: rclient.Resource | None
    desired: Obj | None
    live: Obj | None
    changes: tuple[str, ...] = ()
    state: Literal["served", "missing", "syncing"] = "served"
    failed: bool = False  # the comparison refused it (another owner's object): nothing written


@dataclasses.dataclass(frozen=True, slots=True)
class _Outcome:
    what: str  # "Kind/name"
    action: childsync.Action
    changes: tuple[str, ...]


class InferenceServiceReconciler:
    def __init__(
        self,
        cache: rcache.Cache,
        client: rclient.Client,
        recorder: Recorder | events.EventRecorder,
        optional_kinds: crdwatch.OptionalKinds,
        ctx: base.BuildContext,
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
        #: per InferenceService, the inputs under which its last reconcile's decisions hold
        self.settled = settled_inputs.SettledInputs()

    async def reconcile(self, request: Request) -> Result:
        key = (request.namespace or "", request.name)
        raw = self.cache.get(ISVC, request.namespace, request.name)
        if raw is None or objects.deleting(raw):
            self.settled.forget(key)
            return Result()  # gone: the garbage collector removes the children
        raw = self.own_status.read(raw)
        started = time.perf_counter()
        version = objects.meta(raw).get("resourceVersion")
        decoded = self.settled.decoded(key, version)
        if decoded is not None:
            isvc = decoded  # the same CR: decoded already
        else:
            try:
                isvc = api.decode(raw)
                self._validate_runtime(isvc)
            except api.ValidationError as e:
                self.settled.forget(key)
                await self._invalid(raw, str(e))
                raise TerminalError(f"invalid spec: {e}") from None
        plan = self._rollout(isvc)
        slots = base.slots(isvc, children.CHILDREN, plan.components, plan.route)
        pods = self.cache.by_index(resources.POD, pods_and_slices.POD_INDEX, isvc.key)
        pod_failure, canary_failure = pods_and_slices.failures(pods)
        problems = self._permission_problems(isvc.namespace)
        namespace = isvc.namespace

        def cached(slot: base.Slot, resource: rclient.Resource) -> Obj | None:
            return self.cache.get(resource, namespace, slot.name)

        inputs = self._inputs(version, slots, cached, (pod_failure, canary_failure, plan), problems)
        if self.settled.holds(key, inputs):
            # exactly the inputs of the last reconcile, which found nothing to write: the same
            # decisions again (a resync, a no-op event); nothing to build, compare or write
            return Result()
        run = _Run(raw, isvc)
        await self._sync_all(run, slots)
        # the rollout as the cluster now shows it: the objects our writes answered with (a route we
        # just rewrote, a canary just created or deleted), else the cache. The status reports this
        # split; the next reconcile, reading our writes back, starts from it.
        written_objs = {
            (o.slot.child.kind.plural, o.slot.name): o.live for o in run.observed if o.kind_state == "served"
        }
        after = self._rollout(isvc, written_objs)
        self._event_for_changes(run)
        for what, err in problems:
            run.failures.append(status.Failure(what, err))
            self.recorder.event(raw, "Warning", "PermissionDenied", "Reconcile", f"{what}: {err}")
        new_status = status.compute(
            isvc,
            raw.get("status") or {},
            run.observed,
            run.failures,
            pod_failure,
            self.ctx,
            status.Canary(after, canary_failure),
        )
        sent = time.perf_counter()
        try:
            written = await self._write_status(raw, new_status)
        except rclient.ApiError as e:
            self.recorder.event(raw, "Warning", "StatusUpdateFailed", "UpdateStatus", f"patch status: {e}")
            raise
        all_actions = run.actions + (["status"] if written is not None else [])
        if written is not None:
            run.request_ms["status"] = round((time.perf_counter() - sent) * 1000, 1)
        log.log(
            logging.INFO if all_actions or run.failures else logging.DEBUG,
            "reconciled",
            extra={
                "generation": isvc.generation,
                "diff": run.changes,
                "actions": all_actions,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                "requests_ms": run.request_ms,
            },
        )
        if run.failures:
            self.settled.forget(key)
            raise ReconcileError("; ".join(f"{f.what}: {f.error}" for f in run.failures))
        # what the next reconcile will read once the watches deliver our writes: the objects our
        # writes answered with. Deciding from those gives nothing to write (every write made the
        # cluster carry what was decided), so that is settled too; the echo filter drops those
        # events, and anything else that changes (a controller's status) is a new input.
        lives = {o.slot.key: o.live for o in run.observed}

        def answered(slot: base.Slot, resource: rclient.Resource) -> Obj | None:
            return lives.get(slot.key)

        if (after.components, after.route) != (plan.components, plan.route):
            # our own writes changed what to decide (the route now gives a leaving canary nothing, so
            # it can go): decide again now; those writes' echoes are filtered from the watch
            self.settled.forget(key)
            return Result(requeue=True)
        answer = written or raw
        if objects.generation(answer) != isvc.generation:
            # the status landed on a newer spec than the one decided from: its version must not
            # be settled with this decode (the spec event's reconcile would find "nothing new")
            self.settled.forget(key)
            return Result()
        self.settled.settle(
            key,
            self._inputs(
                objects.meta(answer).get("resourceVersion"),
                slots,
                answered,
                (pod_failure, canary_failure, after),
                problems,
                {o.slot.key: o.kind_state for o in run.observed},
            ),
            isvc,
        )
        return Result()

    def _inputs(
        self,
        cr_version: str | None,
        slots: list[base.Slot],
        live: Callable[[base.Slot, rclient.Resource], Obj | None],
        observed: tuple[object, ...],
        problems: list[tuple[str, rclient.ApiError]],
        decided: Mapping[str, str] | None = None,
    ) -> tuple[object, ...]:
        """Everything a reconcile decides from: the CR's resourceVersion (spec, labels, status), for
        each slot the kind's served version and the live child's resourceVersion, what else was
        observed (the pods' failures, the rollout decided from the canary's endpoints), and what
        cannot be read or recorded. The builders are pure and the settings fixed, so equal inputs
        give equal decisions. ``decided``: per slot key, the kind's state the run decided from
        ("served", "missing", "syncing"), for the inputs it settles: an informer that finished
        listing during the run, or a CRD gone meanwhile, is a new input for the next one."""
        parts: list[object] = [cr_version, observed]
        for slot in slots:
            resource = self.kinds.resolve(slot.child.kind)
            state = (decided or {}).get(slot.key)
            if state is None:
                readable = resource is not None and self._readable(slot.child, resource)
                state = "served" if readable else "missing" if resource is None else "syncing"
            if state != "served" or resource is None:
                parts.append({"missing": None, "syncing": "syncing"}.get(state, "gone"))
                continue
            obj = live(slot, resource)
            parts.append((resource.version, None if obj is None else obj["metadata"].get("resourceVersion")))
        parts.append(tuple((what, str(err)) for what, err in problems))
        return tuple(parts)

    def _validate_runtime(self, isvc: internal.InferenceService) -> None:
        """What only the runtime table can tell (:func:`servers.validate`: the runtime exists, serves
        the declared model formats, does not bind the port itself); before any builder runs, so none
        meets a runtime the table lacks."""
        servers.validate(isvc, self.ctx.servers)

    # -- children -----------------------------------------------------------------------------------

    async def _sync_all(self, run: _Run, slots: list[base.Slot]) -> None:
        """Decide every slot from the cache first, without a request (:meth:`_decide`), then send the
        writes in parallel (they are independent: no child reads another's live state) and record
        the outcomes in slot order, so status, log and Event are the same whatever order the answers
        came in; a reconcile that writes nothing starts no task. Deletions go first: a child that
        replaces another (a KEDA ScaledObject for an HPA: KEDA refuses a ScaledObject whose target
        has an HPA) is created only once the one it replaces is gone."""
        decisions = [self._decide(run, slot) for slot in slots]
        outcomes: dict[int, tuple[status.Observed, _Outcome | None]] = {}
        deletes = [i for i, d in enumerate(decisions) if d.desired is None and d.live is not None]
        writes = [i for i, d in enumerate(decisions) if d.desired is not None and d.changes and not d.failed]
        for phase in (deletes, writes):
            done = await asyncio.gather(*(self._write(run, decisions[i]) for i in phase))
            outcomes.update(zip(phase, done, strict=True))
        for i, (slot, d) in enumerate(zip(slots, decisions, strict=True)):
            observed, outcome = outcomes.get(i) or (status.Observed(slot, d.desired, d.live, d.state), None)
            run.observed.append(observed)
            if outcome is None or outcome.action == "none":
                continue
            what = outcome.what
            run.actions.append(f"{outcome.action[:-1]} {what}")
            if outcome.action != "deleted":
                run.changes[what] = list(outcome.changes)
            run.done.append((outcome.action, what, outcome.changes))

    def _decide(self, run: _Run, slot: base.Slot) -> _Decision:
        """A slot from the cache: what to delete or apply (built, prepared, settled and compared)."""
        child, target = slot.child, slot.target
        resource = self.kinds.resolve(child.kind)
        desired = child.build(target, self.ctx) if target.component.present else None
        if resource is None or not self._readable(child, resource):
            # an optional kind whose CRD is absent (or whose informer is still listing): nothing to
            # read or write; the status says so where the child is wanted
            state: Literal["missing", "syncing"] = "missing" if resource is None else "syncing"
            return _Decision(slot, resource, desired, None, state=state)
        live = self.cache.get(resource, target.isvc.namespace, slot.name)
        if desired is None:
            return _Decision(slot, resource, None, live)
        desired["apiVersion"] = resource.api_version
        self.syncer.prepare(desired, run.raw)
        settle = None if child.settle is None else _bind(child.settle, target)
        try:
            changes = self.syncer.compare(resource, desired, live, settle)
        except rclient.ApiError as e:  # another owner's object of the child's name
            self._failed(run, slot, "apply", e, f"{resource.kind}/{slot.name}")
            return _Decision(slot, resource, desired, live, failed=True)
        return _Decision(slot, resource, desired, live, changes)

    async def _write(self, run: _Run, d: _Decision) -> tuple[status.Observed, _Outcome | None]:
        """Delete or apply one decided slot; a failure is recorded (status, Warning Event)."""
        assert d.resource is not None
        what = f"{d.resource.kind}/{d.slot.name}"
        sent = time.perf_counter()
        try:
            if d.desired is None:
                outcome = await self.syncer.remove(d.resource, d.live, d.slot.target.isvc.uid)
            else:
                outcome = await self.syncer.write(d.resource, d.desired, d.live, d.changes)
        except rclient.ApiError as e:
            run.request_ms[what] = round((time.perf_counter() - sent) * 1000, 1)
            self._failed(run, d.slot, "delete" if d.desired is None else "apply", e, what)
            return status.Observed(d.slot, d.desired, d.live), None
        if outcome.action != "none":
            run.request_ms[what] = round((time.perf_counter() - sent) * 1000, 1)
        if outcome.action in ("created", "updated") and outcome.live is not None:
            self.own_writes.wrote(outcome.live)
        return status.Observed(d.slot, d.desired, outcome.live), _Outcome(
            what, outcome.action, outcome.changes
        )

    def _failed(self, run: _Run, slot: base.Slot, verb: str, e: rclient.ApiError, what: str) -> None:
        run.failures.append(status.Failure(f"{verb} {what}", e))
        self.recorder.event(
            run.raw, "Warning", f"{verb.capitalize()}Failed", verb.capitalize(), f"{verb} {what}: {e}"
        )

    def _event_for_changes(self, run: _Run) -> None:
        """ONE Event per reconcile that changed children, listing every child it created, updated or
        deleted (not one per child: a third of all writes at scale were Events)."""
        if not run.done:
            return
        actions = {action for action, _, _ in run.done}
        reason = "Created" if actions == {"created"} else "Deleted" if actions == {"deleted"} else "Updated"
        parts: list[str] = []
        for action in ("created", "updated", "deleted"):
            items = [(what, changes) for a, what, changes in run.done if a == action]
            if not items:
                continue
            if action == "updated":
                listed = "; ".join(f"{what} ({', '.join(changes[:5])})" for what, changes in items)
            else:
                listed = ", ".join(what for what, _ in items)
            parts.append(f"{action} {listed}" + (" (no longer desired)" if action == "deleted" else ""))
        self.recorder.event(run.raw, "Normal", reason, reason.removesuffix("d"), "; ".join(parts))

    def _rollout(
        self,
        isvc: internal.InferenceService,
        answered: dict[tuple[str, str], Obj | None] | None = None,
    ) -> traffic.Rollout:
        """The canary decision (:func:`traffic.decide`) from the cache, or from the objects this
        reconcile's writes ``answered`` with (by plural and name) where it wrote."""
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

    def _readable(self, child: base.Child, resource: rclient.Resource) -> bool:
        """Built-in kinds are synced with the cache; an optional kind once its informer has listed."""
        return not child.kind.optional or self.cache.synced(resource)

    def _permission_problems(self, namespace: str) -> list[tuple[str, rclient.ApiError]]:
        """What the operator cannot see or record (a 401/403 on list/watch, or on writing Events).

        Any other list/watch error is transient (a restarting API server answers 503, then 429 while
        its watch cache fills, then 410): the informer retries it and the cache is served meanwhile,
        so it fails no reconcile (each failure would grow the key's backoff past the outage)."""
        problems: list[tuple[str, rclient.ApiError]] = []
        watched = [resources.POD, resources.ENDPOINT_SLICE, resources.CRD]
        watched += [r for c in children.CHILDREN if (r := self.kinds.resolve(c.kind)) is not None]
        for group_resource, err in sorted(self.cache.errors(watched).items()):
            if isinstance(err, rclient.ApiError) and err.status in (401, 403):
                problems.append((f"list/watch {group_resource}", err))
        denied = self.recorder.denied.get(namespace)
        if denied is not None:
            problems.append(("create events.events.k8s.io", denied))
        return problems

    # -- status -------------------------------------------------------------------------------------

    async def _write_status(self, raw: Obj, new: Obj) -> Obj | None:
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
        await self._write_status(raw, status.invalid(raw, message))


def _bind(settle: base.SettleFn, target: base.Target) -> childsync.Settle:
    def bound(desired: Obj, live: Obj | None) -> None:
        settle(target, desired, live)

    return bound
