"""The shared cache: one informer per (resource, namespace) per process, read by every controller.

Contract:
- ``informer_for`` returns the same :class:`Informer` for the same resource and namespace scope; an
  informer added after ``start()`` starts at once (kinds can be watched from run time on, e.g. when an
  optional CRD appears) and ``remove_informer`` stops one again.
- An informer created with ``optional=True`` (a kind whose CRD may come and go) never counts for
  :meth:`has_synced` or :meth:`wait_for_sync`: a kind that cannot be served must not make the
  whole process unready. Its readers check :meth:`synced` for it.
- ``wait_for_sync(timeout)`` raises :class:`CacheSyncTimeout` naming every resource not yet synced.
- Reads (``get``, ``list``, ``by_index``) never contact the API server.
- **Scope.** Resources restricted with ``scoped=True`` are also narrowed by the cache's scope
  selector (:meth:`set_scope`, None: no narrowing), ANDed with their own selector, in informers
  created before and after the change. A sharded replica sets it to the partitions it holds, so it
  lists, watches, decodes and stores only their children, and (:meth:`scope_also`, the manager
  does it for the controllers' primary kinds when sharding) only its partitions' primary objects.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from mlops_platform.runtime.caching import informer as rinformer
from mlops_platform.runtime.caching import store as rstore
from mlops_platform.runtime.caching import transforms as rtransforms
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import shape as rshape

#: called with the resource, the old and the new list/watch error of its informer (see
#: :meth:`Cache.add_error_listener`)
ErrorListener = Callable[[rclient.Resource, Exception | None, Exception | None], None]


class CacheSyncTimeout(TimeoutError):
    pass


class Cache:
    """The informer cache shared by a manager's controllers: controller-runtime's ``cache.Cache``.

    - ``Cache(client, namespace=, resync_period=)`` ~ ``cache.Options{DefaultNamespaces, SyncPeriod}``;
    - :meth:`restrict` ~ ``cache.Options.ByObject[obj].Label`` (a label selector per kind);
    - :meth:`transform` ~ ``cache.Options.ByObject[obj].Transform`` (default:
      ``cache.TransformStripManagedFields``);
    - :meth:`informer_for` ~ ``GetInformer``; :meth:`remove_informer` ~ ``RemoveInformer``;
    - :meth:`get` / :meth:`list` ~ the cache's ``client.Reader`` ``Get`` / ``List(client.InNamespace)``;
      :meth:`by_index` ~ ``List(client.MatchingFields{index: value})`` after ``IndexField``;
    - :meth:`wait_for_sync` ~ ``WaitForCacheSync`` (raising, naming what is not synced);
    - :meth:`errors` has no equivalent there (controller-runtime only logs list/watch errors).
    """

    def __init__(
        self,
        client: rclient.Client,
        *,
        namespace: str | None = None,
        resync_period: float = 10 * 3600.0,
        min_watch_timeout: float = 300.0,
    ) -> None:
        self.client = client
        self.namespace = namespace  # None = all namespaces
        self.resync_period = resync_period
        self.min_watch_timeout = min_watch_timeout
        self._informers: dict[tuple[rclient.Resource, str | None], rinformer.Informer] = {}
        self._selectors: dict[rclient.Resource, str] = {}
        self._transforms: dict[rclient.Resource, rtransforms.Transform] = {}
        self._shapes: dict[rclient.Resource, rshape.Shape] = {}
        self._optional: set[tuple[rclient.Resource, str | None]] = set()
        self._scoped: set[rclient.Resource] = set()
        self._scope: str | None = None
        self._started = False
        self._error_listeners: list[ErrorListener] = []

    def restrict(self, resource: rclient.Resource, label_selector: str, *, scoped: bool = False) -> None:
        """Cache only objects of ``resource`` matching ``label_selector`` (call before first use).

        Saves memory and watch traffic (e.g. only pods of our services); objects outside the
        selector are invisible to every reader of this cache. ``scoped``: also narrowed by the
        scope selector (:meth:`set_scope`).
        """
        if any(r == resource for r, _ in self._informers):
            raise RuntimeError(f"restrict({resource.kind}) after its informer was created")
        self._selectors[resource] = label_selector
        if scoped:
            self._scoped.add(resource)

    def scope_also(self, resource: rclient.Resource) -> None:
        """Narrow ``resource`` by the scope selector too, its own selector (if any) kept; call before
        :meth:`set_scope` and :meth:`start` (an informer created already takes the scope then)."""
        if self._started:
            raise RuntimeError(f"scope_also({resource.kind}) after the cache started")
        self._scoped.add(resource)

    def own_selector(self, resource: rclient.Resource) -> str | None:
        """The label selector :meth:`restrict` gave ``resource`` (None: every object), without the scope."""
        return self._selectors.get(resource)

    def _selector(self, resource: rclient.Resource) -> str | None:
        own = self._selectors.get(resource)
        if resource not in self._scoped or self._scope is None:
            return own
        return f"{own},{self._scope}" if own else self._scope

    @property
    def scope(self) -> str | None:
        """The scope selector (None: no narrowing)."""
        return self._scope

    async def set_scope(self, label_selector: str | None, *, adding: str | None = None) -> None:
        """Narrow every scoped resource to ``label_selector`` (None: no narrowing): running
        informers re-list with it (:meth:`~.informer.Informer.reselect`); returns once all have
        stored that LIST. Informers created later start with it. ``adding``: the new scope selects
        what the old one did and what ``adding`` selects; scoped informers then list only that
        (:meth:`~.informer.Informer.widen`), not everything again."""
        self._scope = label_selector
        await asyncio.gather(
            *(
                inf.widen(self._selector(res), self._with_own(res, adding))
                if adding is not None and res in self._scoped
                else inf.reselect(self._selector(res))
                for (res, _), inf in list(self._informers.items())
            )
        )

    def _with_own(self, resource: rclient.Resource, selector: str) -> str:
        own = self._selectors.get(resource)
        return f"{own},{selector}" if own else selector

    def transform(self, resource: rclient.Resource, fn: rtransforms.Transform) -> None:
        """Store objects of ``resource`` as ``fn`` returns them (call before first use), e.g. to drop
        large fields no reader needs. Replaces the default transform (:func:`~.transforms.compact`)."""
        if any(r == resource for r, _ in self._informers):
            raise RuntimeError(f"transform({resource.kind}) after its informer was created")
        self._transforms[resource] = fn

    def shape(self, resource: rclient.Resource, shape: rshape.Shape) -> None:
        """Decode objects of ``resource`` into the fields ``shape`` keeps (call before first use):
        what it leaves out is skipped by the parser, and absent from every object the cache holds
        (:mod:`~mlops_platform.runtime.transport.shape`). The transform runs on the shaped object."""
        if any(r == resource for r, _ in self._informers):
            raise RuntimeError(f"shape({resource.kind}) after its informer was created")
        self._shapes[resource] = shape

    def shape_of(self, resource: rclient.Resource) -> rshape.Shape | None:
        """The shape objects of ``resource`` are cached in (:meth:`shape`), if any."""
        return self._shapes.get(resource)

    def _key(self, resource: rclient.Resource) -> tuple[rclient.Resource, str | None]:
        return resource, self.namespace if resource.namespaced else None

    def informer_for(self, resource: rclient.Resource, *, optional: bool = False) -> rinformer.Informer:
        k = self._key(resource)
        if k not in self._informers:
            informer = rinformer.Informer(
                self.client,
                resource,
                namespace=k[1],
                label_selector=self._selector(resource),
                resync_period=self.resync_period,
                transform=self._transforms.get(resource, rtransforms.compact),
                shape=self._shapes.get(resource),
                min_watch_timeout=self.min_watch_timeout,
            )
            self._informers[k] = informer
            for listener in self._error_listeners:
                informer.add_error_listener(functools.partial(listener, resource))
            if optional:
                self._optional.add(k)
            if self._started:
                informer.start()
        return self._informers[k]

    def add_error_listener(self, listener: ErrorListener) -> None:
        """Call ``listener(resource, old, new)`` whenever the list/watch error of one of the cache's
        informers, now or later, changes kind (:meth:`Informer.add_error_listener`)."""
        self._error_listeners.append(listener)
        for (resource, _), informer in self._informers.items():
            informer.add_error_listener(functools.partial(listener, resource))

    def has_informer(self, resource: rclient.Resource) -> bool:
        return self._key(resource) in self._informers

    def synced(self, resource: rclient.Resource) -> bool:
        """Whether an informer for ``resource`` exists and has stored its first LIST."""
        informer = self._informers.get(self._key(resource))
        return informer is not None and informer.has_synced()

    def detach_informer(self, resource: rclient.Resource) -> rinformer.Informer | None:
        """Forget the informer of ``resource`` at once (a later :meth:`informer_for` creates a new
        one); the caller stops the returned informer (:meth:`Informer.stop`)."""
        k = self._key(resource)
        self._optional.discard(k)
        return self._informers.pop(k, None)

    async def remove_informer(self, resource: rclient.Resource) -> None:
        """Forget and stop the informer of ``resource`` (its handlers and store go with it)."""
        informer = self.detach_informer(resource)
        if informer is not None:
            await informer.stop()

    @property
    def informers(self) -> list[rinformer.Informer]:
        return list(self._informers.values())

    def start(self) -> None:
        self._started = True
        for informer in self._informers.values():
            informer.start()

    async def stop(self) -> None:
        self._started = False
        await asyncio.gather(*(i.stop() for i in self._informers.values()))

    def resync(self) -> None:
        """Replay every synced informer's cache to its handlers now (as the resync period does)."""
        for inf in self._informers.values():
            if inf.has_synced():
                inf.resync()

    def errors(self, resources: list[rclient.Resource] | None = None) -> dict[str, Exception]:
        """Current list/watch errors by resource (e.g. a 403 when RBAC denies list or watch)."""
        out: dict[str, Exception] = {}
        for (res, _), informer in self._informers.items():
            if informer.last_error is not None and (resources is None or res in resources):
                out[res.group_resource] = informer.last_error
        return out

    def _required(self) -> list[rinformer.Informer]:
        return [i for k, i in self._informers.items() if k not in self._optional]

    def has_synced(self) -> bool:
        """Every informer that is not optional has stored its first LIST."""
        return all(i.has_synced() for i in self._required())

    async def wait_for_sync(self, timeout: float) -> None:
        required = self._required()
        try:
            # asyncio.timeout, not wait_for: cancelled (a stop before the sync), Python 3.11's wait_for
            # leaves the gather's CancelledError unretrieved ("_GatheringFuture exception was never
            # retrieved" logged at shutdown); awaited here, the gather's outcome is always taken
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(i.wait_for_sync() for i in required))
        except TimeoutError:
            pending = sorted(i.resource.group_resource for i in required if not i.has_synced())
            raise CacheSyncTimeout(
                f"caches not synced within {timeout:.0f}s: {', '.join(pending)} "
                "(check RBAC list/watch permissions and that the CRDs are installed)"
            ) from None

    def get(self, resource: rclient.Resource, namespace: str | None, name: str) -> Obj | None:
        return self.informer_for(resource).store.get(namespace if resource.namespaced else None, name)

    def by_index(self, resource: rclient.Resource, index: str, value: str) -> list[Obj]:
        return self.informer_for(resource).store.by_index(index, value)

    # defined last: inside the class body the name ``list`` means this method from here on
    def list(self, resource: rclient.Resource, namespace: str | None = None) -> list[Obj]:
        st = self.informer_for(resource).store
        if namespace is None or not resource.namespaced:
            return st.list()
        return st.by_index(rstore.NAMESPACE_INDEX, namespace)
