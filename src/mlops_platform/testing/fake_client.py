"""The in-memory API client of :mod:`mlops_platform.testing.fakes` (import it from there):
:class:`FakeClient` is a :class:`~mlops_platform.runtime.client.Client` that keeps objects in a dict,
records every call (:class:`Call`: verb, resource plural, name, subresource, body) and raises a
chosen :class:`~mlops_platform.runtime.client.ApiError` (:func:`api_error`) for chosen calls
(:meth:`FakeClient.fail`). Writes answer like the API server would in the fields readers look at: a
uid, a resourceVersion, a generation bumped on spec changes and, for a Service, a cluster IP
(:data:`CLUSTER_IP`). No HTTP: every request goes through its overrides.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import rawclient
from mlops_platform.runtime.transport import shape as rshape

JSON = dict[str, Any]
WRITE_VERBS = frozenset({"apply", "replace", "delete", "create", "patch"})
REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid"}
CLUSTER_IP = "10.96.0.10"


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One request the fake answered (or refused)."""

    verb: str
    resource: str  # the plural: "deployments"
    name: str | None
    namespace: str | None = None
    subresource: str | None = None
    body: JSON | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def key(self) -> tuple[str, str, str | None, str | None]:
        """``(verb, resource, name, subresource)``: what assertions compare."""
        return (self.verb, self.resource, self.name, self.subresource)


@dataclasses.dataclass
class _Failure:
    verb: str
    resource: str | None
    name: str | None
    subresource: str | None
    error: rclient.ApiError
    times: int | None

    def matches(self, call: Call) -> bool:
        return (
            self.verb == call.verb
            and self.resource in (None, call.resource)
            and self.name in (None, call.name)
            and self.subresource == call.subresource
            and self.times != 0
        )


def api_error(status: int, message: str = "", reason: str | None = None) -> rclient.ApiError:
    """An :class:`ApiError` as the API server would send it (``reason`` from the status code)."""
    reason = reason or REASONS.get(status, "Unknown")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": status}
    return rclient.ApiError(status, reason, message or reason, {**body, "message": message or reason})


class FakeClient(rclient.Client):
    """A client over a dict of objects: records every call, fails the calls it is told to."""

    def __init__(self) -> None:  # no HTTP client: every request goes through the overrides below
        self._max_retries = 0
        self._resources: dict[tuple[str, str], rclient.Resource] = {}
        self.requests: collections.Counter[tuple[str, str, int]] = collections.Counter()
        self.observers: list[rawclient.RequestObserver] = []
        self.forbidden: collections.deque[str] = collections.deque(maxlen=200)
        self.watches_open = 0
        self.calls: list[Call] = []
        self.objects: dict[tuple[str, str | None, str], JSON] = {}
        self._failures: list[_Failure] = []
        self._rv = 100

    # -- configuration and inspection ------------------------------------------------------------

    def fail(
        self,
        verb: str,
        resource: str | None = None,
        name: str | None = None,
        *,
        status: int = 403,
        message: str = "",
        subresource: str | None = None,
        times: int | None = None,
    ) -> rclient.ApiError:
        """Make matching calls raise (``resource``/``name`` None: any; ``times`` None: always)."""
        if not message and status == 403:
            message = (
                f'{resource or "objects"} "{name or "x"}" is forbidden: User '
                f'"system:serviceaccount:mlops:operator" cannot {verb} resource "{resource}"'
            )
        err = api_error(status, message)
        self._failures.append(_Failure(verb, resource, name, subresource, err, times))
        return err

    def reset_calls(self) -> None:
        self.calls.clear()

    @property
    def keys(self) -> list[tuple[str, str, str | None, str | None]]:
        return [c.key for c in self.calls]

    @property
    def writes(self) -> list[Call]:
        """Writes to objects (not to a status subresource)."""
        return [c for c in self.calls if c.verb in WRITE_VERBS and c.subresource is None]

    @property
    def status_writes(self) -> list[Call]:
        return [c for c in self.calls if c.verb in WRITE_VERBS and c.subresource == "status"]

    def stored(self, res: rclient.Resource, namespace: str | None, name: str) -> JSON | None:
        return self.objects.get((res.plural, namespace if res.namespaced else None, name))

    # -- the client ------------------------------------------------------------------------------

    async def close(self) -> None:
        return None

    @property
    def base_url(self) -> str:
        return "https://fake.invalid"

    async def request(self, method: str, path: str, **kw: Any) -> JSON:
        raise AssertionError(f"FakeClient: unexpected raw request {method} {path}")

    # The verbs take the options they ignore as keywords (``**_``): selectors, paging, resource
    # versions, timeouts, field managers, patch types, dry runs, delete options.

    async def get(self, res: rclient.Resource, name: str, namespace: str | None = None) -> JSON:
        self._call("get", res, name, namespace)
        return self._copy_of_stored(res, namespace, name)

    async def list(
        self,
        res: rclient.Resource,
        namespace: str | None = None,
        *,
        shape: rshape.Shape | None = None,
        **_: Any,
    ) -> JSON:
        """Every stored object of the kind (in ``namespace``), whatever the selectors say."""
        self._call("list", res, None, namespace)
        items = [
            copy.deepcopy(o)
            for (plural, ns, _), o in self.objects.items()
            if plural == res.plural and (namespace is None or ns == namespace)
        ]
        if shape is not None:  # as the real client: decoded into what the shape keeps
            items = rshape.decode(shape.page, msgspec.json.encode({"items": items}))["items"]
        return {"items": items, "metadata": {"resourceVersion": str(self._rv)}}

    async def create(self, res: rclient.Resource, obj: JSON, namespace: str | None = None) -> JSON:
        meta = obj["metadata"]
        ns = namespace or meta.get("namespace")
        self._call("create", res, meta.get("name"), ns, body=obj)
        if "name" not in meta and "generateName" in meta:  # as the API server: a unique suffix
            obj = {
                **obj,
                "metadata": {**meta, "name": f"{meta['generateName']}{self.next_resource_version()}"},
            }
            meta = obj["metadata"]
        if self.stored(res, ns, meta["name"]) is not None:
            raise api_error(409, f'{res.group_resource} "{meta["name"]}" already exists', "AlreadyExists")
        return self._store(res, obj)

    async def replace(self, res: rclient.Resource, obj: JSON, *, subresource: str | None = None) -> JSON:
        meta = obj["metadata"]
        self._call("replace", res, meta["name"], meta.get("namespace"), subresource, obj)
        return self._store(res, obj, subresource)

    async def apply(
        self,
        res: rclient.Resource,
        obj: JSON,
        *,
        subresource: str | None = None,
        shape: rshape.Shape | None = None,
        **_: Any,
    ) -> JSON:
        """Stores ``obj`` as sent (a dry run too); no field ownership."""
        meta = obj["metadata"]
        self._call("apply", res, meta["name"], meta.get("namespace"), subresource, obj)
        stored = self._store(res, obj, subresource)
        # the answer as the real client decodes it: into the caller's shape if it names one
        return stored if shape is None else rshape.decode(shape.object, msgspec.json.encode(stored))

    async def patch(
        self,
        res: rclient.Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        **_: Any,
    ) -> JSON:
        """Records the patch and answers the stored object unchanged."""
        self._call("patch", res, name, namespace, subresource, patch)
        return self._copy_of_stored(res, namespace, name)

    async def delete(self, res: rclient.Resource, name: str, namespace: str | None = None, **_: Any) -> JSON:
        self._call("delete", res, name, namespace)
        gone = self.objects.pop((res.plural, namespace if res.namespaced else None, name), None)
        if gone is None:
            raise api_error(404, f'{res.group_resource} "{name}" not found')
        return {"kind": "Status", "apiVersion": "v1", "status": "Success"}

    async def watch(
        self, res: rclient.Resource, namespace: str | None = None, **_: Any
    ) -> AsyncIterator[JSON]:
        self._call("watch", res, None, namespace)
        events: list[JSON] = []  # an empty stream: these tests never start informers
        for event in events:
            yield event

    # -- internals -------------------------------------------------------------------------------

    def _call(
        self,
        verb: str,
        res: rclient.Resource,
        name: str | None,
        namespace: str | None,
        subresource: str | None = None,
        body: JSON | None = None,
    ) -> None:
        call = Call(verb, res.plural, name, namespace, subresource, copy.deepcopy(body))
        self.calls.append(call)
        for f in self._failures:
            if f.matches(call):
                if f.times is not None:
                    f.times -= 1
                if f.error.status == 403:
                    self.forbidden.append(f.error.message)
                raise f.error

    def _copy_of_stored(self, res: rclient.Resource, namespace: str | None, name: str) -> JSON:
        """A copy of the stored object, else the API server's 404."""
        obj = self.stored(res, namespace, name)
        if obj is None:
            raise api_error(404, f'{res.group_resource} "{name}" not found')
        return copy.deepcopy(obj)

    def next_resource_version(self) -> str:
        """The resourceVersion of the next write: one counter, as etcd's revision (a test that
        changes objects behind the client's back takes its versions from here too, so that
        resourceVersions compare as on a real API server)."""
        self._rv += 1
        return str(self._rv)

    def _store(self, res: rclient.Resource, obj: JSON, subresource: str | None = None) -> JSON:
        meta = obj["metadata"]
        key = (res.plural, meta.get("namespace") if res.namespaced else None, meta["name"])
        old = self.objects.get(key)
        self.next_resource_version()
        if subresource is not None:  # a status write: only that part changes
            base = copy.deepcopy(old) if old is not None else copy.deepcopy(obj)
            base[subresource] = copy.deepcopy(obj.get(subresource))
            base["metadata"]["resourceVersion"] = str(self._rv)
            self.objects[key] = base
            return copy.deepcopy(base)
        new = copy.deepcopy(obj)
        new_meta = new["metadata"]
        old_meta = (old or {}).get("metadata") or {}
        new_meta["uid"] = old_meta.get("uid") or f"uid-{res.plural}-{meta['name']}"
        new_meta["resourceVersion"] = str(self._rv)
        generation = int(old_meta.get("generation") or 0)
        if old is None or old.get("spec") != new.get("spec"):
            generation += 1
        new_meta["generation"] = generation
        if old is not None and "status" in old and "status" not in new:
            new["status"] = copy.deepcopy(old["status"])
        if res.kind == "Service" and res.group == "":
            new.setdefault("spec", {}).setdefault(
                "clusterIP", ((old or {}).get("spec") or {}).get("clusterIP", CLUSTER_IP)
            )
        self.objects[key] = new
        return copy.deepcopy(new)
