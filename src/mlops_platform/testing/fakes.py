"""In-memory fakes for unit tests of reconcilers and the runtime: no cluster, no HTTP.

- :class:`FakeClient` (defined in :mod:`~mlops_platform.testing.fake_client`) is a
  :class:`~mlops_platform.runtime.client.Client` that keeps objects in a dict, records every call
  (verb, resource plural, name, subresource, body) and raises a chosen
  :class:`~mlops_platform.runtime.client.ApiError` for chosen calls (:meth:`FakeClient.fail`).
  Writes answer like the API server would in the fields readers look at: a uid, a resourceVersion,
  a generation bumped on spec changes and, for a Service, a cluster IP.
- :class:`FakeRecorder` records Events (``.events``) and carries the ``.denied`` map of an
  :class:`~mlops_platform.runtime.events.EventRecorder`.
- :func:`seed` fills a :class:`~mlops_platform.runtime.cache.Cache` informer's store without
  starting it, and marks it synced (as its first LIST would).
- :func:`crd` is a CustomResourceDefinition object for a :class:`~mlops_platform.runtime.kinds.Kind`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

import httpx2 as httpx
from aiohttp import web

from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.caching import informer as rinformer
from mlops_platform.runtime.caching import kinds, store
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import http as rhttp
from mlops_platform.runtime.transport import resources
from mlops_platform.testing.fake_client import (
    CLUSTER_IP,
    JSON,
    REASONS,
    WRITE_VERBS,
    Call,
    FakeClient,
    api_error,
)

__all__ = [
    "CLUSTER_IP",
    "JSON",
    "REASONS",
    "WRITE_VERBS",
    "Call",
    "FakeClient",
    "FakeRecorder",
    "RecordedEvent",
    "api_error",
    "controller_status",
    "crd",
    "http_api",
    "seed",
]


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedEvent:
    regarding: str  # namespace/name of the object
    type: str
    reason: str
    action: str
    note: str


class FakeRecorder:
    """Records Events; ``denied`` maps a namespace to the error of writing Events there."""

    def __init__(self) -> None:
        self.events: list[RecordedEvent] = []
        self.denied: dict[str, rclient.ApiError] = {}

    def event(self, regarding: JSON, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append(RecordedEvent(store.key_of(regarding), type_, reason, action, note))

    @property
    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]


def seed(
    cache: rcache.Cache,
    resource: rclient.Resource,
    objs: Iterable[JSON] = (),
    *,
    synced: bool = True,
    optional: bool = False,
) -> rinformer.Informer:
    """Put (copies of) ``objs`` into the store of ``resource``'s informer, which is never started,
    and mark it synced, as its first LIST would."""
    informer = cache.informer_for(resource, optional=optional)
    for obj in objs:
        informer.store.upsert(copy.deepcopy(obj))
    if synced:
        informer._synced.set()
    return informer


def crd(
    kind: kinds.Kind,
    served: Iterable[str] | None = None,
    *,
    established: bool = True,
    deleting: bool = False,
    unserved: Iterable[str] = (),
) -> JSON:
    """The CustomResourceDefinition of ``kind`` serving ``served`` (default: the kind's versions),
    also listing ``unserved`` versions (``served: false``), with a schema per version."""
    versions = list(kind.versions if served is None else served)
    entries = [
        {
            "name": v,
            "served": True,
            "storage": i == 0,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }
        for i, v in enumerate(versions)
    ]
    entries += [{"name": v, "served": False, "storage": False} for v in unserved]
    meta: JSON = {"name": kind.crd_name, "uid": f"uid-crd-{kind.crd_name}", "resourceVersion": "1"}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": meta,
        "spec": {
            "group": kind.group,
            "names": {"kind": kind.kind, "plural": kind.plural, "listKind": f"{kind.kind}List"},
            "scope": "Namespaced" if kind.namespaced else "Cluster",
            "versions": entries,
        },
        "status": {
            "conditions": [
                {"type": "NamesAccepted", "status": "True"},
                {"type": "Established", "status": "True" if established else "False"},
            ],
            "acceptedNames": {"kind": kind.kind, "plural": kind.plural},
        },
    }


def controller_status(res: rclient.Resource, obj: JSON, *, ready: int | None = None) -> JSON:
    """``obj`` (a copy) with the status its controller writes once it has done its job: a
    Deployment rolled out with ``ready`` (default: all) replicas available, an HPA scaling at its
    minimum; other kinds unchanged."""
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    if res == resources.DEPLOYMENT:
        n = int(obj["spec"].get("replicas", 1))
        available = n if ready is None else ready
        obj["status"] = {
            "observedGeneration": meta.get("generation", 1),
            "replicas": n,
            "updatedReplicas": n,
            "readyReplicas": available,
            "availableReplicas": available,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        }
    elif res == resources.HPA:
        obj["status"] = {
            "currentReplicas": obj["spec"].get("minReplicas", 1),
            "desiredReplicas": obj["spec"].get("minReplicas", 1),
            "conditions": [
                {"type": "AbleToScale", "status": "True", "reason": "ReadyForNewScale"},
                {
                    "type": "ScalingActive",
                    "status": "True",
                    "reason": "ValidMetricFound",
                    "message": "the HPA was able to successfully calculate a replica count",
                },
            ],
        }
    return obj


@contextlib.asynccontextmanager
async def http_api(
    route: Callable[[web.Request], Awaitable[web.StreamResponse]], *, auth: httpx.Auth | None = None
) -> AsyncIterator[rclient.Client]:
    """A real :class:`~.client.Client` talking HTTP to a server on 127.0.0.1 whose every answer comes
    from ``route`` (an aiohttp handler): for tests of what the client makes of answers (statuses,
    bodies, headers, streams) that no fake client can show."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", route)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = rclient.Client(rhttp.Transport(f"http://127.0.0.1:{port}", auth=auth))
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()
