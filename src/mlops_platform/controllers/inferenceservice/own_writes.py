"""Read-your-writes of the InferenceService reconciler's own writes.

A write answers with the object as stored; its watch event comes a moment later. Between the two,
the cache still shows the older object. :class:`OwnWrites` keeps the echoes of our child writes out
of the owned-kind watches (the writing reconcile already decided from the answer);
:class:`OwnStatus` keeps the answers of our status writes until the cache holds them, and tells
another writer's status edit from our own echo (:meth:`OwnStatus.foreign_status`).
"""

from __future__ import annotations

from mlops_platform.runtime import objects
from mlops_platform.runtime.control import predicates
from mlops_platform.runtime.objects import Obj


class OwnWrites(predicates.Predicate):
    """The echoes of our own child writes, filtered out of the owned-kind watches.

    A write answers with the object as stored; the reconcile that wrote it already decided from
    that answer (status included). Its watch event, arriving a moment later with the same
    resourceVersion, would only run the same decisions again: it is not enqueued. Any other
    version (another writer, the Deployment controller's status) passes, and so do resyncs.
    """

    def __init__(self) -> None:
        self._versions: dict[tuple[str, str, str], str] = {}

    @staticmethod
    def _key(obj: Obj) -> tuple[str, str, str]:
        return str(obj.get("kind", "")), objects.namespace(obj) or "", objects.name(obj)

    def wrote(self, obj: Obj) -> None:
        rv = objects.meta(obj).get("resourceVersion")
        if rv:
            self._versions[self._key(obj)] = str(rv)

    def _echo(self, obj: Obj) -> bool:
        # any event of the object ends the wait: the watch delivers versions in order, so ours
        # is either this one or was folded into a later one (a relist)
        rv = self._versions.pop(self._key(obj), None)
        return rv is not None and rv == objects.meta(obj).get("resourceVersion")

    def create(self, obj: Obj) -> bool:
        return not self._echo(obj)

    def update(self, old: Obj, new: Obj) -> bool:
        return old is new or not self._echo(new)


class OwnStatus(predicates.Predicate):
    """Our own status writes until the cache holds them: read-your-writes on the primary kind.

    A status write answers with the CR as stored; its watch event comes a moment later. A reconcile
    that starts in between (a pod's or a child's event) would read the older status from the cache,
    compute the one just written, find them different and write it again: a write that changes
    nothing. Until the cache moves past the version the write went over, the reconciler reads the
    answer instead (:meth:`read`). As a predicate of the primary kind it passes every event and
    forgets the object's answer on any of them (the cache is stored before handlers run), so at most
    the writes in flight are kept, not one CR per object.
    """

    def __init__(self) -> None:
        #: per CR, the resourceVersion the write went over and the CR it answered with
        self._answers: dict[tuple[str, str], tuple[str, Obj]] = {}
        #: per CR, the resourceVersions our status writes produced whose events have not come yet
        self._ours: dict[tuple[str, str], set[str]] = {}
        #: whether the update event being filtered is the echo of one of our status writes
        self._echo = False

    @staticmethod
    def _key(obj: Obj) -> tuple[str, str]:
        return objects.namespace(obj) or "", objects.name(obj)

    def wrote(self, over: Obj, answer: Obj) -> None:
        rv = objects.meta(over).get("resourceVersion")
        if rv:
            self._answers[self._key(over)] = (str(rv), answer)
        produced = objects.meta(answer).get("resourceVersion")
        if produced:
            self._ours.setdefault(self._key(answer), set()).add(str(produced))

    def read(self, cached: Obj) -> Obj:
        """``cached``, or our answer while the cache is older than it.

        Older, not "still the version the write went over": a write may go over an earlier answer
        while the cache lags further behind (a watch that delivers nothing until its 410 after an
        API server restart). Reading the cache again then took the object back a generation, and
        the next write's answer forward: the full API-server-restart scenario saw generation 4 and
        5 reconciled in turn, the Deployment rewritten and ``observedGeneration`` 4 written after 5,
        about twenty times until the re-list. Where resourceVersions do not compare, the answer
        holds while the cache shows the version the write went over."""
        key = self._key(cached)
        pending = self._answers.get(key)
        if pending is None:
            return cached
        behind = objects.older(cached, pending[1])
        if behind or (behind is None and pending[0] == objects.meta(cached).get("resourceVersion")):
            return pending[1]
        del self._answers[key]  # the cache caught up (a relist folds events together)
        return cached

    def _forget(self, obj: Obj) -> bool:
        """Forget the answer once the cache holds it or something newer."""
        key = self._key(obj)
        pending = self._answers.get(key)
        if pending is not None and not objects.older(obj, pending[1]):
            del self._answers[key]
        return True

    def create(self, obj: Obj) -> bool:
        return self._forget(obj)

    def update(self, old: Obj, new: Obj) -> bool:
        self._echo = False
        if old is new:
            return True
        key = self._key(new)
        ours = self._ours.get(key)
        rv = str(objects.meta(new).get("resourceVersion") or "")
        if ours is not None:
            self._echo = rv in ours
            ours.discard(rv)
            if not self._echo or not ours:  # another writer's event: our older ones are past
                del self._ours[key]
        return self._forget(new)

    def delete(self, obj: Obj) -> bool:
        self._ours.pop(self._key(obj), None)
        return self._forget(obj)

    def foreign_status(self) -> predicates.Predicate:
        """Updates whose status another writer changed (a user, a tool, a stale controller): the
        operator's status is the truth, so it must reconcile and write it back. The primary kind's
        other predicates pass only generation and label changes, so a status-only edit made nothing
        happen until the 10 h resync (the full conflicts scenario: a Ready condition stomped through
        the status subresource stayed). Our own writes' echoes (:meth:`wrote`) are not passed; this
        must come after this object as a predicate of the same kind (it reads the echo it noted)."""
        return predicates.from_update(
            lambda old, new: old is not new and not self._echo and old.get("status") != new.get("status")
        )
