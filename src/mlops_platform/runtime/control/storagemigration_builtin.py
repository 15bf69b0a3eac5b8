"""The ``builtin`` path of a storage migration (:mod:`~mlops_platform.runtime.control.storagemigration`):
a ``storagemigration.k8s.io/v1beta1`` StorageVersionMigration, written by kube-controller-manager.

Contract:

- served from Kubernetes 1.35 (beta and off by default: feature gate ``StorageVersionMigrator`` plus
  ``--runtime-config=storagemigration.k8s.io/v1beta1=true``); this module speaks only
  :data:`SVM_VERSION` (v1alpha1 of 1.30-1.34 had another spec);
- :meth:`Builtin.run` creates one for the CRD's resource (:func:`migration_manifest`) and polls it
  every ``poll_interval`` until its ``Succeeded`` condition (``Failed``: a
  :class:`~.storagemigration_report.MigrationError` with its message; :func:`migration_state`);
- it raises :class:`NoBuiltin` (``auto`` then falls back to rewriting, saying why) when the API is
  not served, creating one is forbidden, or no controller acts on it within
  ``builtin_start_timeout`` while no other migration of the resource runs (it is then deleted);
- it reports no per-object counts (the controller does the writes): ``seen`` is the number of
  objects at the start. ``status.storedVersions`` is not touched here (the caller trims it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Literal

from mlops_platform.runtime import objects
from mlops_platform.runtime.control import storagemigration_report as report
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

__all__ = [
    "SVM_GROUP",
    "SVM_KIND",
    "SVM_VERSION",
    "Builtin",
    "MigrationState",
    "NoBuiltin",
    "migration_manifest",
    "migration_state",
]

log = logging.getLogger("mlops_platform.runtime.control.storagemigration")

SVM_GROUP = "storagemigration.k8s.io"
#: the one version of the built-in API whose spec and status this module speaks (Kubernetes 1.35+;
#: v1alpha1 of 1.30-1.34 had another spec: a GroupVersionResource and a continue token)
SVM_VERSION = "v1beta1"
SVM_KIND = "StorageVersionMigration"


def migration_manifest(crd: Obj) -> Obj:
    """A StorageVersionMigration (v1beta1) of the CRD's resource, named after the CRD."""
    # generateName appends 5 characters; the base stays a valid DNS subdomain prefix
    base = objects.name(crd)[:200].rstrip(".-")
    return {
        "apiVersion": f"{SVM_GROUP}/{SVM_VERSION}",
        "kind": SVM_KIND,
        "metadata": {"generateName": f"{base}-"},
        "spec": {"resource": {"group": crd["spec"]["group"], "resource": crd["spec"]["names"]["plural"]}},
    }


MigrationState = Literal["pending", "running", "succeeded", "failed"]


def migration_state(svm: Obj) -> tuple[MigrationState, str]:
    """The state of a StorageVersionMigration from its conditions, and the message that goes with it.

    ``pending``: no condition yet (no controller took it, or another migration of the resource runs
    first); ``running``: ``Running=True``; ``succeeded``/``failed``: that condition is True."""
    order: tuple[tuple[str, MigrationState], ...] = (
        ("Failed", "failed"),
        ("Succeeded", "succeeded"),
        ("Running", "running"),
    )
    for type_, state in order:
        cond = objects.condition(svm, type_)
        if cond is not None and cond.get("status") == "True":
            return state, str(cond.get("message") or cond.get("reason") or "")
    return "pending", ""


class NoBuiltin(Exception):
    """The builtin path cannot run here; ``auto`` falls back to rewrite, saying why."""


@dataclasses.dataclass
class Builtin:
    """One CRD's StorageVersionMigration, created and waited for (see the module docstring)."""

    client: rclient.Client
    crd_name: str
    builtin_start_timeout: float
    poll_interval: float
    tally: report.Tally

    async def run(self, crd: Obj, result: report.MigrationResult) -> None:
        svm_res = await self._svm_resource()
        first = await self.client.list(report.resource_of(crd), limit=1)
        count = len(first.get("items") or ()) + int(
            (first.get("metadata") or {}).get("remainingItemCount") or 0
        )
        try:
            svm = await self.client.create(svm_res, migration_manifest(crd))
        except rclient.ApiError as e:
            if e.status == 403:
                raise NoBuiltin(f"not allowed to create {svm_res.group_resource}: {e.message}") from None
            raise
        name = objects.name(svm)
        log.info("storage migration of %s: created StorageVersionMigration %s", self.crd_name, name)
        loop = asyncio.get_running_loop()
        act_by = loop.time() + self.builtin_start_timeout
        while True:
            svm = await self.client.get(svm_res, name)
            state, message = migration_state(svm)
            self.tally.report(
                "waiting", f"StorageVersionMigration {name}: {state}" + (f": {message}" if message else "")
            )
            if state in ("succeeded", "failed"):
                break
            if state == "pending" and loop.time() >= act_by and not await self._other_running(svm_res, svm):
                await self._forget(svm_res, name)
                raise NoBuiltin(
                    f"{SVM_GROUP}/{SVM_VERSION} is served but no controller acted on StorageVersionMigration "
                    f"{name} within {self.builtin_start_timeout:.0f}s (kube-controller-manager without "
                    "--feature-gates=StorageVersionMigrator=true?); it was deleted"
                )
            await asyncio.sleep(self.poll_interval)
        result.method, result.migration, result.seen = "builtin", name, count
        result.rewritten = result.unchanged = result.conflicts = result.gone = None
        if state == "failed":
            result.stored_versions_after = report.stored_versions(
                await self.client.get(resources.CRD, self.crd_name)
            )
            raise report.MigrationError(f"StorageVersionMigration {name} failed: {message}", result)

    async def _svm_resource(self) -> rclient.Resource:
        try:
            return await self.client.resource_for(f"{SVM_GROUP}/{SVM_VERSION}", SVM_KIND)
        except rclient.ApiError as e:
            if e.not_found:
                raise NoBuiltin(f"the server does not serve {SVM_GROUP}/{SVM_VERSION}") from None
            raise
        except LookupError:
            raise NoBuiltin(f"the server serves no {SVM_KIND} in {SVM_GROUP}/{SVM_VERSION}") from None

    async def _other_running(self, svm_res: rclient.Resource, ours: Obj) -> bool:
        """Another migration of the same resource runs: the controller queues ours behind it."""
        try:
            listing = await self.client.list(svm_res)
        except rclient.ApiError as e:
            if e.status == 403:
                return False
            raise
        return any(
            objects.name(s) != objects.name(ours)
            and s.get("spec", {}).get("resource") == ours.get("spec", {}).get("resource")
            and migration_state(s)[0] == "running"
            for s in listing.get("items") or ()
        )

    async def _forget(self, svm_res: rclient.Resource, name: str) -> None:
        try:
            await self.client.delete(svm_res, name)
        except rclient.ApiError as e:
            if not e.not_found:
                raise

    # -- trim ------------------------------------------------------------------------------------
