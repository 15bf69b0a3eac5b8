"""The decision of ``why`` (pure): what the operator would change now, and the :class:`Report`.

:func:`analyze` takes a :class:`~mlops_platform.why.reading.Snapshot` and the operator's settings
(:class:`~mlops_platform.controllers.inferenceservice.children.base.BuildContext`) and decides with
the reconciler's own pure functions: ``api.decode`` and ``servers.validate``, ``traffic.decide``,
``base.slots``, each child's ``build`` and ``settle``, and the subset diff of
:mod:`~mlops_platform.runtime.control.childsync` (``diff.differences`` after the owner reference and
the desired-hash annotation, :func:`prepare`). Contract:

- No I/O; ``now`` (default: the clock) only ages the Events.
- An invalid spec, or an InferenceService being deleted, is reported as the spec problem and no child
  is compared.
- The result assumes the settings given (default: the operator's defaults): settings that differ from
  the operator's flags show children as differing that the operator leaves alone.
"""

from __future__ import annotations

import dataclasses
import datetime

from mlops_platform import api
from mlops_platform.api import analysis_status, internal
from mlops_platform.controllers.inferenceservice import (
    analysis_run,
    children,
    labels,
    pods_and_slices,
    reconciler,
    servers,
    traffic,
)
from mlops_platform.controllers.inferenceservice.children import base, deployment
from mlops_platform.runtime import clock, diff, objects
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.control import childsync
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import resources
from mlops_platform.why import analysis_view, observed, reading, report, summary

#: Events shown by default (newest first)
MAX_EVENTS = 20

DEFAULT_INGRESS_DOMAIN = base.BuildContext().ingress_domain


def settings_of(ctx: base.BuildContext) -> dict[str, str]:
    """The settings ``why`` exposes, as the operator's flags spell them."""
    out = {"--traffic-router": ctx.router.value}
    if ctx.gateway:
        out["--gateway"] = ctx.gateway
    if ctx.ingress_domain != DEFAULT_INGRESS_DOMAIN:
        out["--ingress-domain"] = ctx.ingress_domain
    if ctx.activator:
        out["--activator"] = ctx.activator
    if ctx.scrape_interval != base.DEFAULT_SCRAPE_INTERVAL:
        out["--scrape-interval"] = ctx.scrape_interval
    if ctx.storage_initializer_image != base.DEFAULT_STORAGE_INITIALIZER_IMAGE:
        out["--storage-initializer-image"] = ctx.storage_initializer_image
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class _Comparison:
    """What comparing the children with the live objects gave."""

    #: why the children were not compared (invalid spec, being deleted), else ""
    spec_problem: str = ""
    router: str | None = None
    phase: str | None = None
    phase_message: str = ""
    caveats: tuple[str, ...] = ()
    children: tuple[report.ChildReport, ...] = ()
    #: (kind, name) of every child slot compared (their Events are about the InferenceService)
    names: frozenset[tuple[str, str]] = frozenset()
    #: the canary analysis in the status (None: none)
    analysis: report.AnalysisReport | None = None


def analyze(
    snap: reading.Snapshot,
    ctx: base.BuildContext | None = None,
    *,
    now: datetime.datetime | None = None,
    max_events: int = MAX_EVENTS,
    health: report.HealthReport | None = None,
) -> report.Report:
    """What ``why`` reports about ``snap`` under the operator settings ``ctx`` (default: the
    operator's defaults), with what Prometheus says (``health``, read by :mod:`~.health`). Pure:
    ``now`` (default: the clock) only ages the Events."""
    ctx = ctx or base.BuildContext()
    now = now or clock.utcnow()
    raw = snap.raw
    name, namespace = objects.name(raw), objects.namespace(raw) or ""
    st = raw.get("status") or {}
    compared = _compare(snap, ctx)
    pods = tuple(sorted((observed.pod_report(p, snap.logs) for p in snap.pods), key=lambda p: p.name))
    names = {(api.v1alpha1.KIND, name), *compared.names, *(("Pod", p.name) for p in pods)}
    events = observed.events(snap.events, names, name, now)
    conds = observed.conditions(st)
    observed_generation = st.get("observedGeneration")
    ready = next((c for c in conds if c.type == "Ready"), None)
    partial = report.Report(
        namespace=namespace,
        name=name,
        summary="",
        serving=ready is not None and ready.status == "True",
        generation=objects.generation(raw),
        observed_generation=int(observed_generation) if observed_generation is not None else None,
        url=st.get("url"),
        conditions=conds,
        traffic=tuple(st.get("traffic") or ()),
        settings=settings_of(ctx),
        router=compared.router,
        phase=compared.phase,
        phase_message=compared.phase_message,
        children=compared.children,
        pods=pods,
        events=tuple(events[:max_events]),
        events_total=len(events),
        spec_problem=compared.spec_problem,
        errors=dict(snap.errors),
        caveats=compared.caveats,
        health=health,
        analysis=compared.analysis,
    )
    return dataclasses.replace(partial, summary=summary.summary(partial))


def _compare(snap: reading.Snapshot, ctx: base.BuildContext) -> _Comparison:
    """Decode and validate the spec as the reconciler does, decide the rollout, and compare every
    child slot of it with the live objects."""
    st = snap.raw.get("status") or {}
    try:
        isvc = api.decode(snap.raw)
        servers.validate(isvc, ctx.servers)  # the reconciler's runtime validation
    except api.ValidationError as e:
        return _Comparison(spec_problem=f"InvalidSpec: {e}", analysis=analysis_view.report_of(st, None))
    progress = analysis_view.report_of(st, isvc)
    if objects.deleting(snap.raw):
        return _Comparison(
            spec_problem="being deleted: the garbage collector removes the children", analysis=progress
        )
    # what the reconciler builds while the canary analysis is where its status says (analysis_run)
    isvc = analysis_run.effective(isvc, analysis_status.decode(st.get("analysis")))
    rollout = _rollout(isvc, ctx, snap)
    kids: list[report.ChildReport] = []
    names: set[tuple[str, str]] = set()
    for slot in base.slots(isvc, children.CHILDREN, rollout.components, rollout.route):
        found = _child(slot, ctx, snap)
        names.add((slot.child.kind.kind, slot.name))
        if found is not None:
            kids.append(found)
    return _Comparison(
        router=rollout.route.router.value,
        phase=rollout.plan.phase.value,
        phase_message=rollout.plan.message,
        caveats=_caveats(isvc, snap),
        children=tuple(kids),
        names=frozenset(names),
        analysis=progress,
    )


def _caveats(isvc: internal.InferenceService, snap: reading.Snapshot) -> tuple[str, ...]:
    """The canary's readiness comes from its pods and EndpointSlices: unread, it counts as not
    ready, and the route (and the canary's fate) may compare otherwise than the operator decides."""
    if _live(snap, deployment.KIND, base.component_name_of(isvc, labels.CANARY)) is None:
        return ()
    unread = [
        r.group_resource for r in (resources.POD, resources.ENDPOINT_SLICE) if r.group_resource in snap.errors
    ]
    return tuple(
        f"{what} not readable: the canary counts as not ready, so the route may compare otherwise than "
        "the operator decides"
        for what in unread
    )


def _live(snap: reading.Snapshot, kind: kinds.Kind, name: str) -> Obj | None:
    return snap.children.get((reading.group_resource(kind), name))


def _rollout(
    isvc: internal.InferenceService, ctx: base.BuildContext, snap: reading.Snapshot
) -> traffic.Rollout:
    """The canary decision the reconciler takes (:func:`traffic.decide`), from the live objects
    instead of the cache."""
    return traffic.decide(
        isvc,
        ctx,
        lambda kind: reading.resolve(kind, snap.crds) is not None,
        lambda kind, name: _live(snap, kind, name),
        lambda: sum(pods_and_slices.ready_endpoints(s) for s in snap.canary_slices),
        lambda: snap.pods,
    )


def prepare(desired: Obj, owner: Obj) -> Obj:
    """``desired`` as the reconciler applies it (:func:`childsync.prepare`, in place)."""
    return childsync.prepare(desired, owner, reconciler.HASH_ANNOTATION)


def _child(slot: base.Slot, ctx: base.BuildContext, snap: reading.Snapshot) -> report.ChildReport | None:
    """What the reconciler's ``_sync`` would do with ``slot`` (None: nothing, nothing to say)."""
    child, target = slot.child, slot.target
    uid = target.isvc.uid
    desired = child.build(target, ctx) if target.component.present else None
    resource = reading.resolve(child.kind, snap.crds)

    def child_report(
        action: report.Action, paths: tuple[str, ...] = (), message: str = ""
    ) -> report.ChildReport:
        return report.ChildReport(slot.key, child.kind.kind, slot.name, action, paths, message)

    if resource is None:
        if desired is None:
            return None
        kind = child.kind
        unknown = snap.errors.get(f"{resources.CRD.group_resource}/{kind.crd_name}")
        if unknown is not None:  # whether it is installed cannot be told
            return child_report("unreadable", message=f"CustomResourceDefinition {kind.crd_name}: {unknown}")
        return child_report(
            "crd-missing", message=f"{kind.group} {kind.kind} is not installed: nothing to apply"
        )
    error = snap.errors.get(f"{reading.group_resource(child.kind)}/{slot.name}")
    if error is not None:
        return child_report("unreadable", message=error)
    live = _live(snap, child.kind, slot.name)
    if desired is None:
        if live is None:
            return None
        if childsync.controlled_by(live, uid):
            return child_report("delete", message="no longer desired")
        return child_report(
            "foreign", message="not desired, not controlled by this InferenceService: left alone"
        )
    desired["apiVersion"] = resource.api_version
    prepare(desired, snap.raw)
    if live is not None:
        owner = objects.controller_ref(live)
        if owner is not None and owner.get("uid") != uid:
            taken = childsync.AlreadyOwned(f"{resource.kind} {slot.name}", owner)
            return child_report("conflict", message=taken.message)
    if child.settle is not None:
        child.settle(target, desired, live)
    if live is None:
        return child_report("missing", message="does not exist")
    changes = tuple(diff.differences(desired, live))
    return child_report("update", changes) if changes else child_report("in-sync")
