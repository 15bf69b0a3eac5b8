"""The informer cache: objects by ``namespace/name`` key, with indexes (client-go ``cache.Indexer``).

Contract:
- Keys are ``namespace/name`` for namespaced objects and ``name`` for cluster-scoped ones.
- Every index function maps an object to zero or more index values; ``by_index(index, value)``
  returns the objects whose function produced ``value``. Indexes are maintained on every write.
- All methods are synchronous and never await, so under asyncio each call is atomic: a reader never
  sees a half-applied write. Objects are stored as given (plain dicts); callers must not mutate them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from mlops_platform.runtime import objects
from mlops_platform.runtime.objects import Obj

IndexFunc = Callable[[Obj], Iterable[str]]

NAMESPACE_INDEX = "namespace"
OWNER_INDEX = "owner"


def key_of(obj: Obj) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{ns}/{meta['name']}" if ns else str(meta["name"])


def key(namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if namespace else name


def namespace_index(obj: Obj) -> Iterable[str]:
    ns = obj["metadata"].get("namespace")
    return (ns,) if ns else ()


def controller_owner_index(obj: Obj) -> Iterable[str]:
    """The UID of the object's controller owner (ownerReferences entry with controller=true)."""
    ref = objects.controller_ref(obj)
    return (ref["uid"],) if ref is not None else ()


DEFAULT_INDEXERS: dict[str, IndexFunc] = {
    NAMESPACE_INDEX: namespace_index,
    OWNER_INDEX: controller_owner_index,
}


class Store:
    """A keyed object store with secondary indexes."""

    def __init__(self, indexers: dict[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = dict(DEFAULT_INDEXERS if indexers is None else indexers)
        # index name -> index value -> keys
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        #: objects put in so far (inserted or replacing one): each is new to the garbage collector
        self.writes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, k: str) -> bool:
        return k in self._items

    def add_indexers(self, indexers: dict[str, IndexFunc]) -> None:
        """Add indexes (built over the current content at once)."""
        for name, fn in indexers.items():
            if name in self._indexers:
                raise ValueError(f"indexer {name!r} already exists")
            self._indexers[name] = fn
            self._indices[name] = {}
            for k, obj in self._items.items():
                self._index(name, fn, k, obj)

    def upsert(self, obj: Obj) -> Obj | None:
        """Insert or replace; return the previous object with this key, if any."""
        k = key_of(obj)
        old = self._items.get(k)
        if old is not None:
            self._unindex_all(k, old)
        self._items[k] = obj
        self.writes += 1
        for name, fn in self._indexers.items():
            self._index(name, fn, k, obj)
        return old

    def delete(self, obj: Obj) -> Obj | None:
        return self.delete_key(key_of(obj))

    def delete_key(self, k: str) -> Obj | None:
        old = self._items.pop(k, None)
        if old is not None:
            self._unindex_all(k, old)
        return old

    def get(self, namespace: str | None, name: str) -> Obj | None:
        return self._items.get(key(namespace, name))

    def list_keys(self) -> list[str]:
        return list(self._items)

    def by_index(self, index: str, value: str) -> list[Obj]:
        if index not in self._indices:
            raise KeyError(f"no indexer {index!r}")
        return [self._items[k] for k in self._indices[index].get(value, ())]

    def _index(self, name: str, fn: IndexFunc, k: str, obj: Obj) -> None:
        idx = self._indices[name]
        for value in fn(obj):
            idx.setdefault(value, set()).add(k)

    def _unindex_all(self, k: str, obj: Obj) -> None:
        for name, fn in self._indexers.items():
            idx = self._indices[name]
            for value in fn(obj):
                keys = idx.get(value)
                if keys is not None:
                    keys.discard(k)
                    if not keys:
                        del idx[value]

    # defined last: inside the class body the name ``list`` means this method from here on
    def list(self) -> list[Obj]:
        return [*self._items.values()]
