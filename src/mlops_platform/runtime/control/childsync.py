"""Create-or-update of owned children, generically (controller-runtime's ``controllerutil``).

The caller says WHAT it wants (a desired object, built purely); this module makes the cluster
carry it with as few writes as possible:

- :meth:`ChildSyncer.prepare` adds the controller owner reference and an annotation with a hash of
  the desired object (so a field we stop setting, invisible to a subset compare, is still seen);
- :meth:`ChildSyncer.ensure` compares desired with live (:func:`diff.differences`: semantic subset)
  and, only when they differ, server-side applies the desired object (one field manager, force);
  where other managers' edits survive the apply (list entries they added, clashing entries), it
  overwrites exactly those paths with a replace. No difference: no request at all;
- :meth:`ChildSyncer.remove` deletes a live child that is no longer desired, only if the owner
  controls it (never an object someone else created under the same name);
- an object of the child's name that another owner controls is never taken over:
  :meth:`ChildSyncer.ensure` raises :class:`AlreadyOwned` (an object without a controller is
  adopted, like controller-runtime's ``SetControllerReference``).

API errors propagate (:class:`~mlops_platform.runtime.client.ApiError`); the caller records them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Literal

from mlops_platform.runtime import diff, objects
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import shape as rshape

log = logging.getLogger("mlops_platform.runtime.control.childsync")
Action = Literal["none", "created", "updated", "deleted"]
#: adjusts the desired object to the live one after hashing (fields another controller drives)
Settle = Callable[[Obj, Obj | None], None]


def owner_reference(owner: Obj, *, controller: bool = True) -> Obj:
    """The ownerReferences entry pointing at ``owner`` (blocks its deletion until we are gone)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": objects.name(owner),
        "uid": objects.uid(owner),
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def controlled_by(obj: Obj, uid: str) -> bool:
    """Whether ``obj`` has a controller owner reference to ``uid``."""
    return any(r.get("uid") == uid and r.get("controller") for r in objects.owner_references(obj))


class AlreadyOwned(rclient.ApiError):
    """The live object of a child's name is controlled by another owner: it is left alone."""

    def __init__(self, what: str, owner: Obj) -> None:
        message = (
            f"{what} is controlled by {owner.get('kind')}/{owner.get('name')} (uid {owner.get('uid')}); "
            "rename or delete it"
        )
        super().__init__(409, "AlreadyOwned", message)


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """What one sync did: the action, the paths that differed, and the live object afterwards."""

    action: Action
    live: Obj | None
    changes: tuple[str, ...] = ()


def prepare(desired: Obj, owner: Obj, hash_annotation: str) -> Obj:
    """``desired`` with ``owner`` as its controller owner reference and the desired-hash annotation
    (in place): what :class:`ChildSyncer` applies, and what a reader compares live children with."""
    meta = desired.setdefault("metadata", {})
    meta["ownerReferences"] = [owner_reference(owner)]
    meta.setdefault("annotations", {})[hash_annotation] = diff.desired_hash(desired)
    return desired


class ChildSyncer:
    def __init__(
        self,
        client: rclient.Client,
        *,
        field_manager: str,
        hash_annotation: str,
        shape_of: Callable[[rclient.Resource], rshape.Shape | None] = lambda _: None,
    ) -> None:
        """``shape_of``: the shape the cache holds objects of a kind in (``Cache.shape_of``); an
        apply's answer is decoded into it (what :meth:`compare` reads of a live object is there,
        ``managedFields`` is not built); by default none: the answer whole."""
        self.client = client
        self.field_manager = field_manager
        self.hash_annotation = hash_annotation
        self._shape_of = shape_of

    def prepare(self, desired: Obj, owner: Obj) -> Obj:
        """``desired`` with the controller owner reference and the desired-hash annotation (in place)."""
        return prepare(desired, owner, self.hash_annotation)

    async def ensure(
        self, resource: rclient.Resource, desired: Obj, live: Obj | None, settle: Settle | None = None
    ) -> Outcome:
        """Make the cluster carry ``desired`` (prepared); no request when ``live`` already does."""
        return await self.write(resource, desired, live, self.compare(resource, desired, live, settle))

    def compare(
        self, resource: rclient.Resource, desired: Obj, live: Obj | None, settle: Settle | None = None
    ) -> tuple[str, ...]:
        """The first half of :meth:`ensure`, without a request: the paths where ``live`` lacks
        ``desired`` (prepared; settled to ``live`` first), ``("(absent)",)`` when there is no live
        object, none when it carries them all. Raises :class:`AlreadyOwned` for another's object."""
        if live is not None:
            owner = objects.controller_ref(live)
            ours = objects.owner_references(desired)[0]["uid"]
            if owner is not None and owner.get("uid") != ours:
                raise AlreadyOwned(f"{resource.kind} {objects.name(live)}", owner)
        if settle is not None:
            settle(desired, live)
        return ("(absent)",) if live is None else tuple(diff.differences(desired, live))

    async def write(
        self, resource: rclient.Resource, desired: Obj, live: Obj | None, changes: tuple[str, ...]
    ) -> Outcome:
        """The second half of :meth:`ensure`: apply ``desired`` when :meth:`compare` found ``changes``."""
        if not changes:
            return Outcome("none", live)
        applied = await self._apply_or_overwrite(resource, desired, live)
        return Outcome("created" if live is None else "updated", applied, changes)

    async def remove(self, resource: rclient.Resource, live: Obj | None, owner_uid: str) -> Outcome:
        """Delete ``live`` if ``owner_uid`` controls it (a missing object is already removed)."""
        if live is None or not controlled_by(live, owner_uid):
            return Outcome("none", None)
        try:
            await self.client.delete(
                resource, objects.name(live), objects.namespace(live), propagation_policy="Background"
            )
        except rclient.ApiError as e:
            if not e.not_found:
                raise
        return Outcome("deleted", None)

    async def _apply_or_overwrite(self, resource: rclient.Resource, desired: Obj, live: Obj | None) -> Obj:
        try:
            applied = await self.client.apply(
                resource,
                desired,
                field_manager=self.field_manager,
                force=True,
                shape=self._shape_of(resource),
            )
        except rclient.ApiError as e:
            # an apply that cannot merge with entries another manager added (409/422 on a list
            # entry): fall through to overwriting the differing paths of the live object
            if live is None or e.status not in (409, 422):
                raise
            applied = live
        leftover = diff.difference_paths(desired, applied)
        if leftover:
            log.info(
                "overwriting fields other managers hold",
                extra={"paths": [diff.format_path(p) for p in leftover]},
            )
            applied = await self.client.replace(resource, diff.overwrite(applied, desired, leftover))
        return applied
