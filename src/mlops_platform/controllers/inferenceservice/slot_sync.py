"""Sync one InferenceService's children, slot by slot (docs/design.md, "Decide every slot, then write
only what differs").

Every slot (:func:`base.slots`: every child kind for every component) is decided from the cache
first, without a request: its desired object built, prepared and compared with the live child by
the generic engine (:mod:`~mlops_platform.runtime.control.childsync`); an optional kind whose CRD is
absent, or whose informer is still listing, is skipped and reported. Then only the deletions and
applies that are needed go out, in parallel (they are independent), deletions first. Their outcomes
are recorded in slot order in a :class:`Run`, so status, Event and log line do not depend on which
answer came first; the run ends with ONE Event listing every child created, updated or deleted.
A failed write is recorded (a Warning Event, a :class:`status.Failure`); the reconciler raises it
once the status says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Literal, Protocol

from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import own_writes, status
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.caching import crdwatch
from mlops_platform.runtime.control import childsync
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.observability import events
from mlops_platform.runtime.transport import client as rclient


class Recorder(Protocol):
    denied: dict[str, rclient.ApiError]

    def event(self, regarding: Obj, type_: str, reason: str, action: str, note: str) -> None: ...


@dataclasses.dataclass
class Run:
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

    def written_objects(self) -> dict[tuple[str, str], Obj | None]:
        """The children as the cluster now shows them, by plural and name: the objects our writes
        answered with, else what was read (every served slot)."""
        return {
            (o.slot.child.kind.plural, o.slot.name): o.live for o in self.observed if o.kind_state == "served"
        }


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


@dataclasses.dataclass(frozen=True, slots=True)
class SlotSync:
    """Decides and writes the slots of one reconcile (see the module doc)."""

    cache: rcache.Cache
    kinds: crdwatch.OptionalKinds
    ctx: base.BuildContext
    syncer: childsync.ChildSyncer
    recorder: Recorder | events.EventRecorder
    #: the owned kinds' watch filter, told of every child written (its echo is not enqueued)
    echo_filter: own_writes.OwnWrites

    async def sync(self, raw: Obj, isvc: internal.InferenceService, slots: list[base.Slot]) -> Run:
        """Decide every slot from the cache first, without a request (:meth:`_decide`), then send the
        writes in parallel (they are independent: no child reads another's live state) and record
        the outcomes in slot order, so status, log and Event are the same whatever order the answers
        came in; a reconcile that writes nothing starts no task. Deletions go first: a child that
        replaces another (a KEDA ScaledObject for an HPA: KEDA refuses a ScaledObject whose target
        has an HPA) is created only once the one it replaces is gone."""
        run = Run(raw, isvc)
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
        self._event_for_changes(run)
        return run

    def versions(self, slots: list[base.Slot], run: Run | None = None) -> list[object]:
        """What each slot is decided from, for the reconcile's inputs: the kind's served version and
        the live child's resourceVersion, or the kind's state when it is not served (CRD absent,
        informer still listing). Live from the cache; with ``run``, as that run's writes left them:
        the objects they answered with, and the kind's state each slot was decided from (an
        informer that finished listing during the run, or a CRD gone meanwhile, is a new input for
        the next reconcile)."""
        lives = {} if run is None else {o.slot.key: o.live for o in run.observed}
        decided = {} if run is None else {o.slot.key: o.kind_state for o in run.observed}
        parts: list[object] = []
        for slot in slots:
            resource = self.kinds.resolve(slot.child.kind)
            state = decided.get(slot.key)
            if state is None:
                readable = resource is not None and self._readable(slot.child, resource)
                state = "served" if readable else "missing" if resource is None else "syncing"
            if state != "served" or resource is None:
                parts.append({"missing": None, "syncing": "syncing"}.get(state, "gone"))
                continue
            if run is None:
                obj = self.cache.get(resource, slot.target.isvc.namespace, slot.name)
            else:
                obj = lives.get(slot.key)
            parts.append((resource.version, None if obj is None else obj["metadata"].get("resourceVersion")))
        return parts

    def _readable(self, child: base.Child, resource: rclient.Resource) -> bool:
        """Built-in kinds are synced with the cache; an optional kind once its informer has listed."""
        return not child.kind.optional or self.cache.synced(resource)

    def _decide(self, run: Run, slot: base.Slot) -> _Decision:
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

    async def _write(self, run: Run, d: _Decision) -> tuple[status.Observed, _Outcome | None]:
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
            self.echo_filter.wrote(outcome.live)
        return status.Observed(d.slot, d.desired, outcome.live), _Outcome(
            what, outcome.action, outcome.changes
        )

    def _failed(self, run: Run, slot: base.Slot, verb: str, e: rclient.ApiError, what: str) -> None:
        run.failures.append(status.Failure(f"{verb} {what}", e))
        self.recorder.event(
            run.raw, "Warning", f"{verb.capitalize()}Failed", verb.capitalize(), f"{verb} {what}: {e}"
        )

    def _event_for_changes(self, run: Run) -> None:
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


def _bind(settle: base.SettleFn, target: base.Target) -> childsync.Settle:
    def bound(desired: Obj, live: Obj | None) -> None:
        settle(target, desired, live)

    return bound
