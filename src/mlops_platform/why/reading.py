"""What ``why`` reads: the I/O half of ``mlops-platform why``.

:func:`read` GETs the InferenceService, the CRDs of the optional child kinds and every child the
operator could own, and LISTs the pods, the canary's EndpointSlices and the namespace's Events, into a
:class:`Snapshot` of plain API objects. Contract:

- Independent reads go out together (three rounds in all).
- A read the caller may not make (403, any API error but 404) is recorded in
  :attr:`Snapshot.errors`, not raised, except for the InferenceService itself (:class:`NotFound`, or
  the API error).
- A 404 is an absent object (no key, or None), never an error.
- An optional kind is read at the version the operator resolves (:func:`resolve`), and only when its
  CRD is installed.

:func:`read_rules` is the read-only RBAC this needs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from mlops_platform import api, promapi
from mlops_platform.controllers.inferenceservice import (
    children,
    labels,
    pod_problems,
    pods_and_slices,
    traffic,
)
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime import objects
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

#: Events are listed per namespace in pages of this size, at most this many pages
EVENT_PAGE = 500
EVENT_PAGES = 4

ISVC = api.RESOURCE
T = TypeVar("T")
OPTIONAL_KINDS: tuple[kinds.Kind, ...] = tuple(
    dict.fromkeys(c.kind for c in children.CHILDREN if c.kind.optional)
)


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
        # the previous run's log of a container that stopped and left no termination message
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["list"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get"]},
        # the default Prometheus' HTTP API through the service proxy (alerts and targets: why.health)
        promapi.read_rule(),
    ]
    return rules


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
    #: (pod, container) -> the error its previous run logged last, for a restarted container that
    #: left no termination message (it stopped by itself: MLServer when a model fails to load)
    logs: Mapping[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    #: reads that failed, by what was read ("pods", "deployments.apps/bert-predictor"): the message
    errors: Mapping[str, str] = dataclasses.field(default_factory=dict)


class NotFound(LookupError):
    """The InferenceService does not exist."""


async def read(client: rclient.Client, namespace: str, name: str) -> Snapshot:
    """Read what :func:`analyze` needs of ``namespace/name`` (raises :class:`NotFound`, or the
    :class:`~mlops_platform.runtime.client.ApiError` of reading the InferenceService itself)."""
    raw = await _get_inferenceservice(client, namespace, name)
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
                resources.ENDPOINT_SLICE,
                namespace,
                label_selector=f"{pods_and_slices.CANARY_SLICES},{of_isvc}",
            ),
        ),
        attempt(resources.EVENT.group_resource, _list_events(client, namespace)),
    )
    crds: dict[str, Obj | None] = {k.crd_name: c for k, c in zip(OPTIONAL_KINDS, crd_answers, strict=True)}
    lives: dict[tuple[str, str], Obj | None] = {
        (group_resource(k), n): obj for (k, n), obj in zip(builtin, child_answers, strict=True)
    }
    optional = [(k, n, r) for k, n in names if k.optional and (r := resolve(k, crds)) is not None]
    answers = await asyncio.gather(*(get_child(k, r, n) for k, n, r in optional))
    lives.update({(group_resource(k), n): obj for (k, n, _), obj in zip(optional, answers, strict=True)})
    pod_items = tuple((pods or {}).get("items") or ())
    tails = await _silent_stop_logs(client, namespace, pod_items, attempt)
    return Snapshot(
        raw=raw,
        crds=crds,
        children=lives,
        canary_slices=tuple((slices or {}).get("items") or ()),
        pods=pod_items,
        events=tuple(events or ()),
        errors=errors,
        logs={key: line for key, tail in tails.items() if tail and (line := last_error(tail))},
    )


async def _get_inferenceservice(client: rclient.Client, namespace: str, name: str) -> Obj:
    """The InferenceService (:class:`NotFound` when absent; any other API error as it is)."""
    try:
        return await client.get(ISVC, name, namespace)
    except rclient.ApiError as e:
        if e.not_found:
            raise NotFound(f'inferenceservice "{name}" not found in namespace "{namespace}"') from None
        raise


#: the most a pod's previous log is read for its last error (its tail: where a server's error is)
LOG_TAIL_LINES = 200
#: a Python exception's last line (``pickle.UnpicklingError: invalid load key``) or a logged error
_EXCEPTION = re.compile(r"^[\w.]*(Error|Exception)\w*: .+")
_LOGGED_ERROR = re.compile(r"\b(ERROR|FATAL|Error|error)\b")


async def _silent_stop_logs(
    client: rclient.Client,
    namespace: str,
    pods: Sequence[Obj],
    attempt: Callable[[str, Awaitable[str]], Awaitable[str | None]],
) -> dict[tuple[str, str], str | None]:
    """(pod, container) -> the log of the run that stopped by itself (:func:`silent_stops`)."""
    silent = [(objects.name(p), c, previous) for p in pods for c, previous in silent_stops(p)]
    tails = await asyncio.gather(
        *(
            attempt(
                "pods/log", client.request_text(_log_path(namespace, *s), resource="pods/log", accept="*/*")
            )
            for s in silent
        )
    )
    return {(p, c): tail for (p, c, _), tail in zip(silent, tails, strict=True)}


def silent_stops(pod: Obj) -> list[tuple[str, bool]]:
    """The containers of ``pod`` that stopped by themselves (exit code 0) and so left no termination
    message (the kubelet keeps a log's end only for a failed exit, ``FallbackToLogsOnError``; a failed
    exit without one says its code, and its log is not read), and whether the run that stopped is the
    previous one (the container waits to restart) or the current one (it has not restarted yet):
    that run's log says why."""
    out = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or ():
        now = (cs.get("state") or {}).get("terminated")
        last = (cs.get("lastState") or {}).get("terminated")
        stopped, previous = (now, False) if now else (last, True)
        if stopped and stopped.get("exitCode") == 0 and not str(stopped.get("message") or "").strip():
            out.append((str(cs.get("name")), previous))
    return out


def _log_path(namespace: str, pod: str, container: str, previous: bool) -> str:
    path = f"{resources.POD.path(namespace, pod)}/log?container={container}&tailLines={LOG_TAIL_LINES}"
    return path + ("&previous=true" if previous else "")


def last_error(log: str) -> str:
    """The last exception line of a log, else its last line that logs an error ("" when none)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for pattern in (_EXCEPTION, _LOGGED_ERROR):
        found = next((line for line in reversed(lines) if pattern.search(line)), "")
        if found:
            return pod_problems.bounded(found)
    return ""


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


def resolve(kind: kinds.Kind, crds: Mapping[str, Obj | None]) -> rclient.Resource | None:
    """The resource of ``kind`` as the operator resolves it (an optional kind: the most preferred
    served version of its Established CRD that the builder speaks; None when not installed)."""
    if not kind.optional:
        return kind.resource()
    version = kinds.served_version(kind, crds.get(kind.crd_name))
    return kind.resource(version) if version else None
