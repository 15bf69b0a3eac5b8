"""``mlops-platform why NAME`` (and ``kubectl mlops why NAME``): why an InferenceService is, or is
not, serving, read from the API alone (no operator logs, no operator process needed).

Three parts, so the human output can be golden-tested without a cluster:

- :func:`read` does the I/O: GETs of the InferenceService, of the CRDs of the optional child kinds,
  of every child the operator could own, LISTs of the pods, the canary's EndpointSlices and the
  namespace's Events. Independent reads go out together (three rounds in all). A read the caller
  may not make (403) is recorded, not raised, except for the InferenceService itself.
- :func:`analyze` is pure: from a :class:`Snapshot` and the operator's settings
  (:class:`~mlops_platform.controllers.inferenceservice.children.base.BuildContext`) it decides what
  the reconciler would change now, with the reconciler's own pure functions: ``api.decode``,
  ``traffic.choose_router``, ``traffic.rollout``, ``base.slots``, each child's ``build`` and
  ``settle``, and the subset diff of :mod:`~mlops_platform.runtime.control.childsync`
  (``diff.differences`` after the owner reference and the desired-hash annotation). It also gathers
  the conditions, the effective split (``status.traffic``), the pods' causes and the Events.
- :func:`render_text` and :func:`to_json` present a :class:`Report`.

The result depends on the operator's settings: :func:`analyze` assumes the defaults unless told
otherwise, so the options given to ``why`` (``--traffic-router``, ``--gateway``,
``--ingress-domain``) must match the operator's flags, or children show as differing that the
operator leaves alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import shutil
import textwrap
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import click

from mlops_platform import api
from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import (
    children,
    labels,
    reconciler,
    servers,
    status,
    traffic,
)
from mlops_platform.controllers.inferenceservice.children import (
    base,
    deployment,
)
from mlops_platform.runtime import clock, diff, objects
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.control import childsync
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

#: Events shown by default (newest first)
MAX_EVENTS = 20
#: pods shown in the human output (those with a problem first); the JSON lists all of them
MAX_PODS = 10
#: changed paths listed per child in the human output; the JSON lists all of them
MAX_PATHS = 6
#: Events are listed per namespace in pages of this size, at most this many pages
EVENT_PAGE = 500
EVENT_PAGES = 4

ISVC = api.RESOURCE
DEFAULT_INGRESS_DOMAIN = base.BuildContext().ingress_domain
T = TypeVar("T")
#: the path of the desired-hash annotation, as the diff names it
HASH_PATH = f"metadata.annotations.{reconciler.HASH_ANNOTATION}"
OPTIONAL_KINDS: tuple[kinds.Kind, ...] = tuple(
    dict.fromkeys(c.kind for c in children.CHILDREN if c.kind.optional)
)

Action = Literal["in-sync", "missing", "update", "delete", "crd-missing", "conflict", "unreadable", "foreign"]
#: the actions by which the operator would write (what "would change" counts)
WRITES: frozenset[str] = frozenset({"missing", "update", "delete"})


def group_resource(kind: kinds.Kind) -> str:
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural


def read_rules() -> list[Obj]:
    """The RBAC rules ``why`` needs (a ClusterRole, or a Role per namespace without the CRD rule):
    read-only, nothing else. Without one, the part it feeds is reported as unreadable."""
    child_kinds = dict.fromkeys(c.kind for c in children.CHILDREN)
    by_group: dict[str, list[str]] = {}
    for kind in child_kinds:
        by_group.setdefault(kind.group, []).append(kind.plural)
    rules: list[Obj] = [{"apiGroups": [api.v1alpha1.GROUP], "resources": [ISVC.plural], "verbs": ["get"]}]
    rules += [
        {"apiGroups": [group], "resources": sorted(plurals), "verbs": ["get"]}
        for group, plurals in sorted(by_group.items())
    ]
    rules += [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["list"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get"]},
    ]
    return rules


# -- what is read --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything ``why`` reads of one InferenceService (plain API objects)."""

    raw: Obj
    #: the CRD of each optional child kind by CRD name (None: not installed)
    crds: Mapping[str, Obj | None] = dataclasses.field(default_factory=dict)
    #: live children by (group resource, name), e.g. ("deployments.apps", "bert-predictor"); absent
    #: key or None: no such object
    children: Mapping[tuple[str, str], Obj | None] = dataclasses.field(default_factory=dict)
    #: the canary Service's EndpointSlices (what the reconciler counts ready endpoints in)
    canary_slices: Sequence[Obj] = ()
    pods: Sequence[Obj] = ()
    #: the namespace's Events (events.k8s.io/v1), any order; filtered by :func:`analyze`
    events: Sequence[Obj] = ()
    #: reads that failed, by what was read ("pods", "deployments.apps/bert-predictor"): the message
    errors: Mapping[str, str] = dataclasses.field(default_factory=dict)


class NotFound(LookupError):
    """The InferenceService does not exist."""


async def read(client: rclient.Client, namespace: str, name: str) -> Snapshot:
    """Read what :func:`analyze` needs of ``namespace/name`` (raises :class:`NotFound`, or the
    :class:`~mlops_platform.runtime.client.ApiError` of reading the InferenceService itself)."""
    try:
        raw = await client.get(ISVC, name, namespace)
    except rclient.ApiError as e:
        if e.not_found:
            raise NotFound(f'inferenceservice "{name}" not found in namespace "{namespace}"') from None
        raise
    errors: dict[str, str] = {}

    async def attempt(what: str, call: Awaitable[T]) -> T | None:
        try:
            return await call
        except rclient.ApiError as e:
            if not e.not_found:
                errors[what] = f"{e.status} {e.reason}: {e.message}"
            return None

    def get_child(kind: kinds.Kind, resource: rclient.Resource, child_name: str) -> Awaitable[Obj | None]:
        return attempt(f"{group_resource(kind)}/{child_name}", client.get(resource, child_name, namespace))

    names = _child_names(raw)
    builtin = [(k, n) for k, n in names if not k.optional]
    of_isvc = f"{labels.INFERENCESERVICE}={name}"
    crd_answers, child_answers, pods, slices, events = await asyncio.gather(
        asyncio.gather(
            *(
                attempt(f"{resources.CRD.group_resource}/{k.crd_name}", client.get(resources.CRD, k.crd_name))
                for k in OPTIONAL_KINDS
            )
        ),
        asyncio.gather(*(get_child(k, k.resource(), n) for k, n in builtin)),
        attempt(resources.POD.group_resource, client.list(resources.POD, namespace, label_selector=of_isvc)),
        attempt(
            resources.ENDPOINT_SLICE.group_resource,
            client.list(
                resources.ENDPOINT_SLICE, namespace, label_selector=f"{reconciler.CANARY_SLICES},{of_isvc}"
            ),
        ),
        attempt(resources.EVENT.group_resource, _list_events(client, namespace)),
    )
    crds: dict[str, Obj | None] = {k.crd_name: c for k, c in zip(OPTIONAL_KINDS, crd_answers, strict=True)}
    lives: dict[tuple[str, str], Obj | None] = {
        (group_resource(k), n): obj for (k, n), obj in zip(builtin, child_answers, strict=True)
    }
    optional = [(k, n, r) for k, n in names if k.optional and (r := _resolve(k, crds)) is not None]
    answers = await asyncio.gather(*(get_child(k, r, n) for k, n, r in optional))
    lives.update({(group_resource(k), n): obj for (k, n, _), obj in zip(optional, answers, strict=True)})
    return Snapshot(
        raw=raw,
        crds=crds,
        children=lives,
        canary_slices=tuple((slices or {}).get("items") or ()),
        pods=tuple((pods or {}).get("items") or ()),
        events=tuple(events or ()),
        errors=errors,
    )


async def _list_events(client: rclient.Client, namespace: str) -> list[Obj]:
    """The namespace's Events, a bounded number of pages (Events live an hour by default)."""
    items: list[Obj] = []
    token: str | None = None
    for _ in range(EVENT_PAGES):
        page = await client.list(resources.EVENT, namespace, limit=EVENT_PAGE, continue_=token)
        items += page.get("items") or ()
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            break
    return items


def _child_names(raw: Obj) -> list[tuple[kinds.Kind, str]]:
    """(kind, name) of every child the operator could own for ``raw``, whatever the rollout: every
    slot of both components (names depend on the InferenceService's name and the component only)."""
    try:
        isvc = api.decode(raw)
    except api.ValidationError:
        return []
    plan = traffic.rollout(isvc, base.BuildContext(), base.Router.REPLICAS, None, None, None, None, 0)
    out = [(s.child.kind, s.name) for s in base.slots(isvc, children.CHILDREN, plan.components)]
    return list(dict.fromkeys(out))


def _resolve(kind: kinds.Kind, crds: Mapping[str, Obj | None]) -> rclient.Resource | None:
    """The resource of ``kind`` as the operator resolves it (an optional kind: the most preferred
    served version of its Established CRD that the builder speaks; None when not installed)."""
    if not kind.optional:
        return kind.resource()
    version = kinds.served_version(kind, crds.get(kind.crd_name))
    return kind.resource(version) if version else None


# -- the decision: what the operator would change now (pure) ------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ChildReport:
    slot: str  # "predictor/deployment"
    kind: str
    name: str
    action: Action
    #: the differing paths (``update``)
    paths: tuple[str, ...] = ()
    message: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ContainerReport:
    name: str
    init: bool
    ready: bool
    restarts: int
    state: str  # waiting | running | terminated | unknown
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    #: the last termination (lastState.terminated): reason, exit code, message
    last_reason: str = ""
    last_exit_code: int | None = None
    last_message: str = ""

    @property
    def failing(self) -> bool:
        return self.reason in status.POD_FAILURE_REASONS or (
            self.state == "terminated" and self.exit_code not in (None, 0)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PodReport:
    name: str
    component: str
    phase: str
    ready: bool
    node: str
    #: PodScheduled=False: (reason, message)
    unscheduled: tuple[str, str] | None
    containers: tuple[ContainerReport, ...]
    #: a pod-level reason (Evicted, ...) and message
    reason: str = ""
    message: str = ""
    terminating: bool = False

    @property
    def restarts(self) -> int:
        return sum(c.restarts for c in self.containers)

    @property
    def problem(self) -> bool:
        return (
            self.unscheduled is not None
            or any(c.failing for c in self.containers)
            or self.phase in ("Failed", "Unknown")
        )


@dataclasses.dataclass(frozen=True, slots=True)
class EventReport:
    type: str
    reason: str
    note: str
    object: str  # "Pod/bert-predictor-abc"
    count: int
    last_seen: datetime.datetime | None
    age: str


@dataclasses.dataclass(frozen=True, slots=True)
class ConditionReport:
    type: str
    status: str
    reason: str
    message: str
    last_transition: str


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    namespace: str
    name: str
    summary: str
    serving: bool
    generation: int
    observed_generation: int | None
    url: str | None
    conditions: tuple[ConditionReport, ...]
    #: status.traffic as served (the effective split), empty without a canary
    traffic: tuple[Obj, ...]
    #: the settings assumed (as the operator's flags)
    settings: Mapping[str, str]
    router: str | None
    phase: str | None
    phase_message: str
    children: tuple[ChildReport, ...]
    pods: tuple[PodReport, ...]
    events: tuple[EventReport, ...]
    events_total: int
    #: why the children were not compared (invalid spec, being deleted), else ""
    spec_problem: str
    errors: Mapping[str, str]
    #: what limits the comparison (an input of the canary decision that could not be read)
    caveats: tuple[str, ...] = ()

    @property
    def changes(self) -> tuple[ChildReport, ...]:
        return tuple(c for c in self.children if c.action in WRITES)

    @property
    def up_to_date(self) -> bool:
        return self.observed_generation == self.generation


def settings_of(ctx: base.BuildContext) -> dict[str, str]:
    """The settings ``why`` exposes, as the operator's flags spell them."""
    out = {"--traffic-router": ctx.router.value}
    if ctx.gateway:
        out["--gateway"] = ctx.gateway
    if ctx.ingress_domain != DEFAULT_INGRESS_DOMAIN:
        out["--ingress-domain"] = ctx.ingress_domain
    if ctx.storage_initializer_image != base.DEFAULT_STORAGE_INITIALIZER_IMAGE:
        out["--storage-initializer-image"] = ctx.storage_initializer_image
    return out


def analyze(
    snap: Snapshot,
    ctx: base.BuildContext | None = None,
    *,
    now: datetime.datetime | None = None,
    max_events: int = MAX_EVENTS,
) -> Report:
    """What ``why`` reports about ``snap`` under the operator settings ``ctx`` (default: the
    operator's defaults). Pure: ``now`` (default: the clock) only ages the Events."""
    ctx = ctx or base.BuildContext()
    now = now or clock.utcnow()
    raw = snap.raw
    name, namespace = objects.name(raw), objects.namespace(raw) or ""
    st = raw.get("status") or {}
    spec_problem = ""
    caveats: tuple[str, ...] = ()
    kids: list[ChildReport] = []
    router = phase = None
    phase_message = ""
    names: set[tuple[str, str]] = {(api.v1alpha1.KIND, name)}
    isvc: internal.InferenceService | None = None
    try:
        isvc = api.decode(raw)
        servers.validate(isvc, ctx.servers)  # the reconciler's runtime validation
    except api.ValidationError as e:
        spec_problem = f"InvalidSpec: {e}"
        isvc = None
    if isvc is not None and objects.deleting(raw):
        spec_problem = "being deleted: the garbage collector removes the children"
    elif isvc is not None:
        rollout = _rollout(isvc, ctx, snap)
        router, phase, phase_message = (
            rollout.route.router.value,
            rollout.plan.phase.value,
            rollout.plan.message,
        )
        caveats = _caveats(isvc, snap)
        for slot in base.slots(isvc, children.CHILDREN, rollout.components, rollout.route):
            found = _child(slot, ctx, snap)
            names.add((slot.child.kind.kind, slot.name))
            if found is not None:
                kids.append(found)
    pods = tuple(sorted((_pod(p) for p in snap.pods), key=lambda p: p.name))
    names |= {("Pod", p.name) for p in pods}
    events = _events(snap.events, names, name, now)
    conds = _conditions(st)
    observed = st.get("observedGeneration")
    ready = next((c for c in conds if c.type == "Ready"), None)
    serving = ready is not None and ready.status == "True"
    partial = Report(
        namespace=namespace,
        name=name,
        summary="",
        serving=serving,
        generation=objects.generation(raw),
        observed_generation=int(observed) if observed is not None else None,
        url=st.get("url"),
        conditions=conds,
        traffic=tuple(st.get("traffic") or ()),
        settings=settings_of(ctx),
        router=router,
        phase=phase,
        phase_message=phase_message,
        children=tuple(kids),
        pods=pods,
        events=tuple(events[:max_events]),
        events_total=len(events),
        spec_problem=spec_problem,
        errors=dict(snap.errors),
        caveats=caveats,
    )
    return dataclasses.replace(partial, summary=_summary(partial))


def _caveats(isvc: internal.InferenceService, snap: Snapshot) -> tuple[str, ...]:
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


def _live(snap: Snapshot, kind: kinds.Kind, name: str) -> Obj | None:
    return snap.children.get((group_resource(kind), name))


def _rollout(isvc: internal.InferenceService, ctx: base.BuildContext, snap: Snapshot) -> traffic.Rollout:
    """The canary decision the reconciler takes (:func:`traffic.decide`), from the live objects
    instead of the cache."""
    return traffic.decide(
        isvc,
        ctx,
        lambda kind: _resolve(kind, snap.crds) is not None,
        lambda kind, name: _live(snap, kind, name),
        lambda: sum(reconciler.ready_endpoints(s) for s in snap.canary_slices),
        lambda: snap.pods,
    )


def prepare(desired: Obj, owner: Obj) -> Obj:
    """``desired`` as the reconciler applies it (:func:`childsync.prepare`, in place)."""
    return childsync.prepare(desired, owner, reconciler.HASH_ANNOTATION)


def _child(slot: base.Slot, ctx: base.BuildContext, snap: Snapshot) -> ChildReport | None:
    """What the reconciler's ``_sync`` would do with ``slot`` (None: nothing, nothing to say)."""
    child, target = slot.child, slot.target
    uid = target.isvc.uid
    desired = child.build(target, ctx) if target.component.present else None
    resource = _resolve(child.kind, snap.crds)

    def report(action: Action, paths: tuple[str, ...] = (), message: str = "") -> ChildReport:
        return ChildReport(slot.key, child.kind.kind, slot.name, action, paths, message)

    if resource is None:
        if desired is None:
            return None
        kind = child.kind
        unknown = snap.errors.get(f"{resources.CRD.group_resource}/{kind.crd_name}")
        if unknown is not None:  # whether it is installed cannot be told
            return report("unreadable", message=f"CustomResourceDefinition {kind.crd_name}: {unknown}")
        return report("crd-missing", message=f"{kind.group} {kind.kind} is not installed: nothing to apply")
    error = snap.errors.get(f"{group_resource(child.kind)}/{slot.name}")
    if error is not None:
        return report("unreadable", message=error)
    live = _live(snap, child.kind, slot.name)
    if desired is None:
        if live is None:
            return None
        if childsync.controlled_by(live, uid):
            return report("delete", message="no longer desired")
        return report("foreign", message="not desired, not controlled by this InferenceService: left alone")
    desired["apiVersion"] = resource.api_version
    prepare(desired, snap.raw)
    if live is not None:
        owner = objects.controller_ref(live)
        if owner is not None and owner.get("uid") != uid:
            taken = childsync.AlreadyOwned(f"{resource.kind} {slot.name}", owner)
            return report("conflict", message=taken.message)
    if child.settle is not None:
        child.settle(target, desired, live)
    if live is None:
        return report("missing", message="does not exist")
    changes = tuple(diff.differences(desired, live))
    return report("update", changes) if changes else report("in-sync")


# -- pods, Events, conditions (pure) -------------------------------------------------------------


def _container(cs: Obj, *, init: bool) -> ContainerReport:
    state = cs.get("state") or {}
    kind = next((k for k in ("waiting", "terminated", "running") if state.get(k) is not None), "unknown")
    now = state.get(kind) or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    exit_code = now.get("exitCode")
    last_code = last.get("exitCode")
    return ContainerReport(
        name=str(cs.get("name") or ""),
        init=init,
        ready=bool(cs.get("ready")),
        restarts=int(cs.get("restartCount") or 0),
        state=kind,
        reason=str(now.get("reason") or ""),
        message=str(now.get("message") or "").strip(),
        exit_code=None if exit_code is None else int(exit_code),
        last_reason=str(last.get("reason") or ""),
        last_exit_code=None if last_code is None else int(last_code),
        last_message=str(last.get("message") or "").strip(),
    )


def _pod(pod: Obj) -> PodReport:
    st = pod.get("status") or {}
    unscheduled = status.unscheduled(pod)
    inits = [_container(cs, init=True) for cs in st.get("initContainerStatuses") or ()]
    # an init container that completed is no cause of anything
    inits = [c for c in inits if not (c.state == "terminated" and c.exit_code == 0)]
    mains = [_container(cs, init=False) for cs in st.get("containerStatuses") or ()]
    return PodReport(
        name=objects.name(pod),
        component=objects.labels(pod).get(labels.COMPONENT, ""),
        phase=str(st.get("phase") or "Unknown"),
        ready=objects.condition_is(pod, "Ready"),
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        unscheduled=unscheduled,
        containers=(*inits, *mains),
        reason=str(st.get("reason") or ""),
        message=str(st.get("message") or "").strip(),
        terminating=objects.deleting(pod),
    )


def _time(value: object) -> datetime.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        t = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.UTC)


def age(t: datetime.datetime | None, now: datetime.datetime) -> str:
    """``45s``, ``12m``, ``5h``, ``3d`` (as ``kubectl`` abbreviates); ``?`` without a time."""
    if t is None:
        return "?"
    seconds = max(0, int((now - t).total_seconds()))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 120:
        return f"{minutes}m"
    hours = minutes // 60
    return f"{hours}h" if hours < 48 else f"{hours // 24}d"


def _generated_from(name: str, owner: str, dashes: int) -> bool:
    """Whether ``name`` is ``<owner>-<x>`` with ``dashes`` more dashes in ``<x>``: the name of a
    ReplicaSet (0: ``<deployment>-<hash>``) or a Pod (1: ``<deployment>-<hash>-<suffix>``) of it."""
    rest = name.removeprefix(f"{owner}-")
    return rest != name and bool(rest) and rest.count("-") == dashes


def _events(
    items: Iterable[Obj], names: set[tuple[str, str]], isvc: str, now: datetime.datetime
) -> list[EventReport]:
    """The Events about the InferenceService, its children and its pods (also ReplicaSets and pods
    of its Deployments that are gone), newest first."""
    owners = [f"{isvc}-{labels.PREDICTOR}", f"{isvc}-{labels.CANARY}"]
    out: list[EventReport] = []
    for e in items:
        regarding = e.get("regarding") or {}
        kind, name = str(regarding.get("kind") or ""), str(regarding.get("name") or "")
        ours = (kind, name) in names or any(
            (kind == "ReplicaSet" and _generated_from(name, o, 0))
            or (kind == "Pod" and _generated_from(name, o, 1))
            for o in owners
        )
        if not ours:
            continue
        series = e.get("series") or {}
        last = (
            _time(series.get("lastObservedTime"))
            or _time(e.get("deprecatedLastTimestamp"))
            or _time(e.get("eventTime"))
            or _time(objects.meta(e).get("creationTimestamp"))
        )
        count = int(series.get("count") or e.get("deprecatedCount") or 1)
        out.append(
            EventReport(
                type=str(e.get("type") or ""),
                reason=str(e.get("reason") or ""),
                note=" ".join(str(e.get("note") or "").split()),
                object=f"{kind}/{name}",
                count=count,
                last_seen=last,
                age=age(last, now),
            )
        )
    oldest = datetime.datetime.min.replace(tzinfo=datetime.UTC)
    out.sort(key=lambda ev: (ev.last_seen or oldest, ev.object, ev.reason), reverse=True)
    return out


def _conditions(st: Obj) -> tuple[ConditionReport, ...]:
    """``status.conditions``, Ready first, then in the order the status lists them."""
    conds = [
        ConditionReport(
            type=str(c.get("type") or ""),
            status=str(c.get("status") or "Unknown"),
            reason=str(c.get("reason") or ""),
            message=str(c.get("message") or ""),
            last_transition=str(c.get("lastTransitionTime") or ""),
        )
        for c in st.get("conditions") or ()
    ]
    return tuple(sorted(conds, key=lambda c: c.type != "Ready"))


def _container_cause(pod: PodReport, c: ContainerReport) -> str:
    if c.init and c.name == deployment.STORAGE_INITIALIZER:
        ran = c.state == "terminated"
        failed = c.exit_code if ran else c.last_exit_code
        if failed not in (None, 0):  # the status' words: ModelDownloadFailed, the initializer's line
            message, reason = (c.message, c.reason) if ran else (c.last_message, c.last_reason)
            line = status.download_failure(pod.name, message, failed, reason)
            return f"{status.MODEL_DOWNLOAD_FAILED}: {line}"
    what = "init container" if c.init else "container"
    detail = c.message
    if c.last_reason or c.last_exit_code is not None:
        last = ", ".join(
            x
            for x in (c.last_reason, f"exit code {c.last_exit_code}" if c.last_exit_code is not None else "")
            if x
        )
        detail = f"{detail} (last terminated: {last})" if detail else f"last terminated: {last}"
    reason = c.reason or "Error"
    return f"{reason}: pod {pod.name} {what} {c.name}" + (f": {detail}" if detail else "")


def _cause(r: Report) -> str:
    """The one most specific reason of the state, for the summary line."""
    if r.spec_problem:
        return r.spec_problem
    ready = next((c for c in r.conditions if c.type == "Ready"), None)
    if ready is not None and ready.reason in ("InvalidSpec", "ReconcileFailed"):
        return f"{ready.reason}: {ready.message}"
    if r.serving:
        assert ready is not None
        text = f"{ready.reason}: {ready.message}" if ready.message else ready.reason
        bad = next((c for c in r.conditions if c.type != "Ready" and c.status == "False"), None)
        return f"{text}; {bad.type} is False: {bad.reason}" if bad is not None else text
    # not serving: a failing container, then an unschedulable pod, of the stable component first
    pods = sorted(r.pods, key=lambda p: p.component == labels.CANARY)
    for pod in pods:
        for c in pod.containers:
            if c.failing:
                return _container_cause(pod, c)
    for pod in pods:
        if pod.unscheduled is not None:
            reason, message = pod.unscheduled
            return f"{reason}: pod {pod.name}" + (f": {message}" if message else "")
    if ready is None:
        return "no status yet: no operator has reconciled it (is one running, watching this namespace?)"
    return f"{ready.reason}: {ready.message}" if ready.message else ready.reason


def _summary(r: Report) -> str:
    line = f"{r.name}: {'serving' if r.serving else 'not serving'} — {_cause(r)}"
    notes = []
    if r.observed_generation is not None and not r.up_to_date:
        notes.append(f"the status is of generation {r.observed_generation}, the spec at {r.generation}")
    if r.changes:
        n = len(r.changes)
        notes.append(f"the operator would change {n} child{'ren' if n > 1 else ''}")
    return line + (f" ({'; '.join(notes)})" if notes else "")


# -- presentation ----------------------------------------------------------------------------------


def to_json(r: Report) -> Obj:
    """The report for machines (``-o json``); see docs/why.md for the shape."""
    return {
        "name": r.name,
        "namespace": r.namespace,
        "summary": r.summary,
        "serving": r.serving,
        "generation": r.generation,
        "observedGeneration": r.observed_generation,
        "upToDate": r.up_to_date,
        "url": r.url,
        "conditions": [
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": c.last_transition,
            }
            for c in r.conditions
        ],
        "traffic": [dict(t) for t in r.traffic],
        "rollout": None
        if r.router is None
        else {"router": r.router, "phase": r.phase, "message": r.phase_message},
        "settings": dict(r.settings),
        "specProblem": r.spec_problem or None,
        "caveats": list(r.caveats),
        "children": [
            {
                "slot": c.slot,
                "kind": c.kind,
                "name": c.name,
                "action": c.action,
                "paths": list(c.paths),
                "message": c.message,
            }
            for c in r.children
        ],
        "wouldChange": len(r.changes),
        "pods": [_pod_json(p) for p in r.pods],
        "events": [
            {
                "type": e.type,
                "reason": e.reason,
                "note": e.note,
                "object": e.object,
                "count": e.count,
                "lastSeen": None if e.last_seen is None else clock.rfc3339(e.last_seen),
                "age": e.age,
            }
            for e in r.events
        ],
        "eventsTotal": r.events_total,
        "errors": dict(r.errors),
    }


def _pod_json(p: PodReport) -> Obj:
    return {
        "name": p.name,
        "component": p.component,
        "phase": p.phase,
        "ready": p.ready,
        "node": p.node or None,
        "restarts": p.restarts,
        "terminating": p.terminating,
        "unscheduled": None
        if p.unscheduled is None
        else {"reason": p.unscheduled[0], "message": p.unscheduled[1]},
        "reason": p.reason or None,
        "message": p.message or None,
        "containers": [
            {
                "name": c.name,
                "init": c.init,
                "ready": c.ready,
                "restartCount": c.restarts,
                "state": c.state,
                "reason": c.reason or None,
                "message": c.message or None,
                "exitCode": c.exit_code,
                "lastTermination": None
                if not (c.last_reason or c.last_exit_code is not None)
                else {
                    "reason": c.last_reason or None,
                    "exitCode": c.last_exit_code,
                    "message": c.last_message or None,
                },
            }
            for c in p.containers
        ],
    }


Style = Mapping[str, Any]
Cell = tuple[str, Style]
_PLAIN: Style = {}
_GOOD: Style = {"fg": "green"}
_BAD: Style = {"fg": "red"}
_WARN: Style = {"fg": "yellow"}
_DIM: Style = {"dim": True}
_STATUS = {"True": _GOOD, "False": _BAD, "Unknown": _WARN}
_ACTIONS: dict[str, tuple[str, Style]] = {
    "in-sync": ("in sync", _GOOD),
    "missing": ("missing", _WARN),
    "update": ("update", _WARN),
    "delete": ("delete", _WARN),
    "crd-missing": ("no CRD", _WARN),
    "conflict": ("conflict", _BAD),
    "unreadable": ("unreadable", _BAD),
    "foreign": ("foreign", _DIM),
}
_MIN_LAST = 30  # narrower than this, the last column goes under the row


class _Out:
    """Lines at a width, styled only when colour is on (widths count the plain text)."""

    def __init__(self, width: int, color: bool) -> None:
        self.width = max(40, width)
        self.color = color
        self.lines: list[str] = []

    def style(self, text: str, s: Style) -> str:
        return click.style(text, **s) if self.color and s and text else text

    def blank(self) -> None:
        self.lines.append("")

    def title(self, text: str, note: str = "") -> None:
        self.blank()
        if not note or len(text) + 1 + len(note) <= self.width:
            self.lines.append(
                self.style(text, {"bold": True}) + (self.style(f" {note}", _DIM) if note else "")
            )
            return
        self.lines.append(self.style(text, {"bold": True}))
        self.wrapped(note, 2, _DIM)

    def wrapped(self, text: str, indent: int, s: Style = _PLAIN, first: str | None = None) -> None:
        """``text`` wrapped at the width, each line indented (the first by ``first`` if given)."""
        lead = " " * indent
        for i, line in enumerate(_wrap(text, self.width - indent)):
            self.lines.append((first if i == 0 and first is not None else lead) + self.style(line, s))

    def table(self, rows: Sequence[Sequence[Cell]], indent: int = 2) -> None:
        """Aligned columns; the last one wraps at the width (under the row when narrow)."""
        if not rows:
            return
        n = len(rows[0])
        widths = [max(len(row[i][0]) for row in rows) for i in range(n - 1)]
        for row in rows:
            cells = [
                self.style(t.ljust(w), s) if t else " " * w for (t, s), w in zip(row, widths, strict=False)
            ]
            head = " " * indent + "  ".join(cells)
            used = indent + sum(widths) + 2 * (n - 1)
            last, s = row[-1]
            if not last:
                self.lines.append(head.rstrip())
            elif self.width - used >= _MIN_LAST:
                self.wrapped(last, used, s, first=head + "  ")
            else:
                self.lines.append(head.rstrip())
                self.wrapped(last, indent + 4, s)


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, max(20, width), break_long_words=False, break_on_hyphens=False) or [""]


def _describe_traffic(traffic: Sequence[Obj]) -> str:
    parts = []
    for t in traffic:
        version = t.get("version") or t.get("modelUri") or ""
        ready = t.get("readyReplicas", 0)
        parts.append(f"{t.get('percent', 0)} % {t.get('component')} (version {version}, {ready} ready)")
    return ", ".join(parts)


def render_text(r: Report, *, width: int = 100, color: bool = False) -> str:
    """The report for humans: the summary line first, then each part."""
    out = _Out(width, color)
    out.wrapped(r.summary, 0, {"bold": True, **(_GOOD if r.serving else _BAD)})

    out.title(f"InferenceService {r.namespace}/{r.name}")
    observed = "none" if r.observed_generation is None else str(r.observed_generation)
    gen = f"{r.generation}, status observed {observed}" + ("" if r.up_to_date else " (behind)")
    traffic = _describe_traffic(r.traffic) if r.traffic else "100 % predictor (no canary)"
    rollout = "-" if r.router is None else f"{r.router} router, {r.phase}: {r.phase_message}"
    out.table(
        [
            [("generation", _PLAIN), (gen, _PLAIN if r.up_to_date else _WARN)],
            [("url", _PLAIN), (r.url or "- (set only while Ready)", _PLAIN)],
            [("traffic", _PLAIN), (traffic, _PLAIN)],
            [("rollout", _PLAIN), (rollout, _PLAIN)],
        ]
    )

    out.title("Conditions")
    if r.conditions:
        out.table(
            [
                [
                    (c.type, _PLAIN),
                    (c.status, _STATUS.get(c.status, _PLAIN)),
                    (c.reason, _PLAIN),
                    (c.message, _PLAIN),
                ]
                for c in r.conditions
            ]
        )
    else:
        out.wrapped("none: no operator has written a status", 2, _WARN)

    flags = " ".join(f"{k}={v}" for k, v in r.settings.items())
    out.title("Children", f"(what the operator would change now, assuming {flags})")
    if r.spec_problem:
        out.wrapped(f"not compared: {r.spec_problem}", 2, _WARN)
    for caveat in r.caveats:
        out.wrapped(caveat, 2, _WARN)
    rows: list[list[Cell]] = []
    for c in r.children:
        label, s = _ACTIONS[c.action]
        detail = c.message
        if c.paths == (HASH_PATH,):
            detail = f"only {HASH_PATH} differs: the operator stopped setting a field; its apply removes it"
        elif c.paths:
            shown = ", ".join(c.paths[:MAX_PATHS])
            more = len(c.paths) - MAX_PATHS
            detail = f"differs at {shown}" + (f" and {more} more" if more > 0 else "")
        rows.append([(label, s), (f"{c.kind}/{c.name}", _PLAIN), (detail, _PLAIN)])
    out.table(rows)

    out.title("Pods", f"({len(r.pods)}; label {labels.INFERENCESERVICE}={r.name})")
    if not r.pods:
        out.wrapped("none", 2, _DIM)
    shown_pods = sorted(r.pods, key=lambda p: not p.problem)[:MAX_PODS]
    for p in shown_pods:
        ready = ("ready", _GOOD) if p.ready else ("not ready", _BAD if p.problem else _WARN)
        node = f"node {p.node}" if p.node else "no node"
        extra = ", terminating" if p.terminating else ""
        out.table(
            [[(p.name, _PLAIN), (p.phase, _PLAIN), ready, (f"restarts {p.restarts}, {node}{extra}", _PLAIN)]]
        )
        if p.unscheduled is not None:
            reason, message = p.unscheduled
            out.wrapped(f"{reason}: {message}" if message else reason, 4, _BAD)
        if p.reason or p.message:
            out.wrapped(": ".join(x for x in (p.reason, p.message) if x), 4, _BAD)
        for container in p.containers:
            out.wrapped(_describe_container(container), 4, _BAD if container.failing else _PLAIN)
    if len(r.pods) > len(shown_pods):
        out.wrapped(f"... and {len(r.pods) - len(shown_pods)} more (-o json lists all)", 2, _DIM)

    out.title(
        "Events", f"(newest first, {len(r.events)} of {r.events_total}: age, type, reason, object: note)"
    )
    rows = []
    for e in r.events:
        when = e.age + (f" (x{e.count})" if e.count > 1 else "")
        kind = _WARN if e.type == "Warning" else _PLAIN
        rows.append([(when, _PLAIN), (e.type, kind), (e.reason, _PLAIN), (f"{e.object}: {e.note}", _PLAIN)])
    out.table(rows)
    if not rows:
        out.wrapped("none", 2, _DIM)

    if r.errors:
        out.title("Not readable", "(RBAC: see docs/why.md)")
        out.table([[(what, _PLAIN), (message, _BAD)] for what, message in sorted(r.errors.items())])
    return "\n".join(out.lines) + "\n"


def _describe_container(c: ContainerReport) -> str:
    what = "init container" if c.init else "container"
    state = c.state + (f" {c.reason}" if c.reason else "")
    if c.exit_code is not None:
        state += f" (exit code {c.exit_code})"
    text = f"{what} {c.name}: {'ready' if c.ready else 'not ready'}, {state}"
    if c.message:
        text += f": {c.message}"
    text += f"; restarts {c.restarts}"
    if c.last_reason or c.last_exit_code is not None:
        code = f", exit code {c.last_exit_code}" if c.last_exit_code is not None else ""
        text += f"; last terminated: {c.last_reason or 'unknown'}{code}"
        if c.last_message:
            text += f": {c.last_message}"
    return text


# -- the command's I/O -------------------------------------------------------------------------------


class WhyError(Exception):
    """``why`` could not report (no such object, no access, no cluster): the message says why."""


def use_color(stream: Any) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set (no-color.org)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")


def terminal_width() -> int:
    """The terminal's width (``$COLUMNS`` first; 100 when not a terminal)."""
    return shutil.get_terminal_size((100, 24)).columns


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context (``default`` without one), as ``kubectl`` picks it."""
    from lightkube.config import kubeconfig as lightkube_kubeconfig

    if kubeconfig:
        config = lightkube_kubeconfig.KubeConfig.from_file(Path(kubeconfig))
    else:
        config = lightkube_kubeconfig.KubeConfig.from_env()
    single = config.get(context_name=context)
    return str(single.namespace) if single is not None else "default"


async def collect(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    name: str,
    ctx: base.BuildContext,
    *,
    max_events: int = MAX_EVENTS,
) -> Report:
    """Connect (``kubeconfig``/``context``; default ``$KUBECONFIG``), read and analyze."""
    try:
        ns = namespace or default_namespace(kubeconfig, context)
        client = rclient.Client.from_kubeconfig(kubeconfig, context=context)
    except Exception as e:  # lightkube's config errors have no common base
        raise WhyError(f"kubeconfig: {e}") from None
    async with client:
        try:
            snap = await read(client, ns, name)
        except NotFound as e:
            raise WhyError(str(e)) from None
        except rclient.ApiError as e:
            raise WhyError(
                f"reading inferenceservice {ns}/{name}: {e.status} {e.reason}: {e.message}"
            ) from None
        except rclient.TransportError as e:
            raise WhyError(f"cannot reach the API server at {client.base_url}: {e}") from None
    return analyze(snap, ctx, max_events=max_events)
