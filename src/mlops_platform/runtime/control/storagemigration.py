"""Storage version migration of a CustomResourceDefinition's objects (kube-storage-version-migrator's job).

When a CRD's storage version changes, etcd still holds the objects written before at the old
version, and ``status.storedVersions`` lists every version that may still be stored. Before an old
version can be dropped from the CRD, every object must be written again (the API server encodes
every write at the current storage version) and ``status.storedVersions`` trimmed to the storage
version. :func:`migrate` does both, for any CRD:

- nothing to do (and no request that writes) when ``status.storedVersions`` is already
  ``[storage version]``;
- ``rewrite``: list the objects at the storage version in pages (``limit``/``continue``) and PUT each
  back unchanged with its ``resourceVersion``, a bounded number at once. The API server re-encodes
  the object at the storage version; an object already stored at it is not written at all (its
  ``resourceVersion`` stays: counted as ``unchanged``). A 409 means someone else wrote it meanwhile
  (which re-encoded it too): re-read and PUT again, counted as a conflict. A 404 means it was
  deleted meanwhile (``gone``). A continue token that expired (410) restarts the list, skipping the
  objects this run already did;
- ``builtin``: where the server serves ``storagemigration.k8s.io/v1beta1`` (Kubernetes 1.35+, beta
  and off by default: feature gate ``StorageVersionMigrator`` plus
  ``--runtime-config=storagemigration.k8s.io/v1beta1=true``), create a StorageVersionMigration for the
  resource and wait for its ``Succeeded`` condition (``Failed``: :class:`MigrationError` with its
  message). kube-controller-manager's storage-version-migrator-controller does the writes (and,
  since 1.35, trims ``storedVersions`` itself). ``auto`` uses it when served, and falls back to
  ``rewrite`` (saying why in :attr:`MigrationResult.fallback_reason`) when creating one is forbidden
  or no controller acts on it within ``builtin_start_timeout``;
- then, and only when every object was migrated without error, ``status.storedVersions`` is set to
  ``[storage version]`` through the CRD's ``/status`` subresource (a PUT with the CRD's
  ``resourceVersion``, refused if the storage version changed during the run). An interrupted or
  failed run leaves ``storedVersions`` as it was, so it is safe to stop and run again.

The operator never runs this (its RBAC has none of it); the ``migrate-storage`` command does, with
the rights listed in docs/storage-migration.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, Callable
from typing import Literal

from mlops_platform.runtime import objects
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

log = logging.getLogger("mlops_platform.runtime.control.storagemigration")

Method = Literal["auto", "builtin", "rewrite"]
MethodUsed = Literal["none", "builtin", "rewrite"]
Phase = Literal["rewriting", "waiting", "trimming"]
METHODS: tuple[Method, ...] = ("auto", "builtin", "rewrite")

SVM_GROUP = "storagemigration.k8s.io"
#: the one version of the built-in API whose spec and status this module speaks (Kubernetes 1.35+;
#: v1alpha1 of 1.30-1.34 had another spec: a GroupVersionResource and a continue token)
SVM_VERSION = "v1beta1"
SVM_KIND = "StorageVersionMigration"
#: PUTs of one object after 409 conflicts before it counts as failed
MAX_CONFLICT_RETRIES = 5
#: failed objects (other than conflicts and deletions) after which a rewrite stops early
MAX_FAILURES = 20
#: status PUTs of the CRD after 409 conflicts
MAX_TRIM_RETRIES = 5


class MigrationError(RuntimeError):
    """The migration did not complete: ``status.storedVersions`` was not trimmed.

    ``result`` holds the counts so far (its ``stored_versions_after`` is what the CRD says now);
    ``failures`` the objects that could not be rewritten, one ``namespace/name: error`` each."""

    def __init__(
        self, message: str, result: MigrationResult | None = None, failures: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.result = result
        self.failures = failures or []


@dataclasses.dataclass(frozen=True, slots=True)
class Progress:
    """What :func:`migrate` hands its ``progress`` callback: after each object, and each poll."""

    phase: Phase
    seen: int = 0
    #: objects in the list when its first page came (``remainingItemCount``); None when unknown
    total: int | None = None
    rewritten: int = 0
    unchanged: int = 0
    conflicts: int = 0
    gone: int = 0
    failed: int = 0
    message: str = ""


@dataclasses.dataclass(slots=True)
class MigrationResult:
    """What a migration did. Counts are None where the method cannot know them (``builtin``: the
    controller does the writes and reports none; ``seen`` is then the number of objects at the start)."""

    crd: str
    method: MethodUsed
    storage_version: str
    stored_versions_before: list[str]
    stored_versions_after: list[str]
    seconds: float = 0.0
    #: objects listed (each once, even across list restarts)
    seen: int | None = 0
    #: objects this run's PUT re-encoded (their resourceVersion changed)
    rewritten: int | None = 0
    #: objects already stored at the storage version: the PUT was accepted and wrote nothing
    unchanged: int | None = 0
    #: objects someone else wrote during the run (409): re-read, PUT again, migrated
    conflicts: int | None = 0
    #: objects deleted during the run (404)
    gone: int | None = 0
    #: lists restarted because their continue token expired (410)
    list_restarts: int = 0
    #: the StorageVersionMigration of the builtin path
    migration: str | None = None
    #: why ``auto`` did not use the builtin path (None: it did, or was not asked to)
    fallback_reason: str | None = None

    def summary(self) -> str:
        """One line for a person."""
        before, after = _versions(self.stored_versions_before), _versions(self.stored_versions_after)
        if self.method == "none":
            return f"{self.crd}: nothing to do, storedVersions is already {after} ({self.seconds:.1f}s)"
        head = f"{self.crd}: storedVersions {before} -> {after} by {self.method} in {self.seconds:.1f}s"
        if self.method == "builtin":
            counts = f"StorageVersionMigration {self.migration}, {self.seen} objects at the start"
        else:
            counts = (
                f"{self.seen} objects: {self.rewritten} rewritten, {self.unchanged} already current, "
                f"{self.conflicts} conflicts, {self.gone} gone"
            )
            if self.list_restarts:
                counts += f", {self.list_restarts} list restarts"
        tail = f" (builtin not used: {self.fallback_reason})" if self.fallback_reason else ""
        return f"{head}: {counts}{tail}"


ProgressCallback = Callable[[Progress], None]


def _versions(versions: list[str]) -> str:
    return "[" + ", ".join(versions) + "]"


# -- pure parts ------------------------------------------------------------------------------------


def storage_version(crd: Obj) -> str:
    """The name of the CRD's storage version (exactly one version has ``storage: true``)."""
    stored = [v["name"] for v in crd.get("spec", {}).get("versions", ()) if v.get("storage")]
    if len(stored) != 1:
        raise MigrationError(f"CRD {objects.name(crd)} has {len(stored)} storage versions, not 1")
    return str(stored[0])


def stored_versions(crd: Obj) -> list[str]:
    return [str(v) for v in (crd.get("status") or {}).get("storedVersions") or ()]


def needs_migration(crd: Obj) -> bool:
    """Whether ``status.storedVersions`` lists anything but the storage version."""
    return stored_versions(crd) != [storage_version(crd)]


def resource_of(crd: Obj) -> rclient.Resource:
    """The REST resource of the CRD's objects at its storage version."""
    spec = crd["spec"]
    return rclient.Resource(
        spec["group"],
        storage_version(crd),
        spec["names"]["plural"],
        spec["names"]["kind"],
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
    )


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


# -- the migration ---------------------------------------------------------------------------------


async def migrate(
    client: rclient.Client,
    crd_name: str,
    *,
    method: Method = "auto",
    progress: ProgressCallback | None = None,
    page_size: int = 500,
    concurrency: int = 8,
    timeout: float | None = None,
    builtin_start_timeout: float = 30.0,
    poll_interval: float = 1.0,
) -> MigrationResult:
    """Migrate every object of the CRD ``crd_name`` to its storage version, then trim its
    ``status.storedVersions`` to that version (see the module docstring).

    ``progress`` is called after each object (rewrite) or each poll (builtin); an exception it
    raises ends the migration with that exception, like a cancellation or ``timeout`` (seconds for
    the whole run; TimeoutError), leaving ``storedVersions`` untouched. Objects that cannot be
    rewritten (other than conflicts and deletions) raise :class:`MigrationError` once the rest are
    done; a 401/403 or a transport error ends the run at once.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if page_size < 1 or concurrency < 1:
        raise ValueError("page_size and concurrency must be >= 1")
    started = time.monotonic()
    async with asyncio.timeout(timeout):
        result = await _Migration(
            client,
            crd_name,
            method=method,
            progress=progress,
            page_size=page_size,
            concurrency=concurrency,
            builtin_start_timeout=builtin_start_timeout,
            poll_interval=poll_interval,
        ).run()
    result.seconds = time.monotonic() - started
    return result


class _NoBuiltin(Exception):
    """The builtin path cannot run here; ``auto`` falls back to rewrite, saying why."""


Outcome = Literal["rewritten", "unchanged", "conflict", "gone"]


@dataclasses.dataclass
class _Migration:
    client: rclient.Client
    crd_name: str
    method: Method
    progress: ProgressCallback | None
    page_size: int
    concurrency: int
    builtin_start_timeout: float
    poll_interval: float
    counts: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(("seen", "rewritten", "unchanged", "conflict", "gone"), 0)
    )
    failures: list[str] = dataclasses.field(default_factory=list)
    total: int | None = None

    async def run(self) -> MigrationResult:
        crd = await self.client.get(resources.CRD, self.crd_name)
        storage = storage_version(crd)
        result = MigrationResult(self.crd_name, "none", storage, stored_versions(crd), stored_versions(crd))
        if not needs_migration(crd):
            return result
        if self.method in ("auto", "builtin"):
            try:
                await self._builtin(crd, result)
            except _NoBuiltin as e:
                if self.method == "builtin":
                    raise MigrationError(f"the builtin migration cannot run: {e}", result) from None
                log.info("storage migration of %s: builtin not used (%s); rewriting", self.crd_name, e)
                result.fallback_reason = str(e)
            else:
                return result
        await self._rewrite(crd, result)
        return result

    # -- rewrite ---------------------------------------------------------------------------------

    async def _rewrite(self, crd: Obj, result: MigrationResult) -> None:
        result.method = "rewrite"
        res = resource_of(crd)
        pending: set[asyncio.Task[Outcome]] = set()
        names: dict[asyncio.Task[Outcome], str] = {}
        try:
            async with contextlib.aclosing(self._objects(res, result)) as listed:
                async for obj in listed:
                    while len(pending) >= self.concurrency:
                        pending = await self._reap(pending, names)
                    if len(self.failures) >= MAX_FAILURES:
                        break
                    task = asyncio.create_task(self._rewrite_one(res, obj))
                    names[task] = _key(obj)
                    pending.add(task)
            while pending:
                pending = await self._reap(pending, names)
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self._fill(result)
        if self.failures:
            self.failures.sort()  # by namespace/name, whatever order the concurrent writes ended in
            result.stored_versions_after = stored_versions(
                await self.client.get(resources.CRD, self.crd_name)
            )
            shown = "; ".join(self.failures[:5])
            raise MigrationError(
                f"{len(self.failures)} objects of {res.group_resource} could not be rewritten "
                f"(storedVersions left as they were): {shown}",
                result,
                list(self.failures),
            )
        result.stored_versions_after = await self._trim(result.storage_version)

    async def _objects(self, res: rclient.Resource, result: MigrationResult) -> AsyncGenerator[Obj, None]:
        """Every object, once: pages of ``page_size``; an expired continue token restarts the list."""
        done: set[str] = set()
        token: str | None = None
        while True:
            try:
                page = await self.client.list(res, limit=self.page_size, continue_=token)
            except rclient.ApiError as e:
                if not (e.gone and token is not None):
                    raise
                log.info("storage migration of %s: continue token expired; listing again", self.crd_name)
                result.list_restarts += 1
                token = None
                continue
            meta = page.get("metadata") or {}
            if token is None and self.total is None:
                self.total = len(page.get("items") or ()) + int(meta.get("remainingItemCount") or 0)
            for obj in page.get("items") or ():
                uid = objects.uid(obj) or _key(obj)
                if uid in done:
                    continue
                done.add(uid)
                self.counts["seen"] += 1
                # a list's items carry no kind; a PUT body needs it
                obj.setdefault("apiVersion", res.api_version)
                obj.setdefault("kind", res.kind)
                yield obj
            token = meta.get("continue") or None
            if token is None:
                return

    async def _rewrite_one(self, res: rclient.Resource, obj: Obj) -> Outcome:
        conflicted = False
        for _ in range(MAX_CONFLICT_RETRIES):
            try:
                written = await self.client.replace(res, obj)
            except rclient.ApiError as e:
                if e.not_found:
                    return "gone"
                if not e.conflict:
                    raise
                conflicted = True
                try:
                    obj = await self.client.get(res, objects.name(obj), objects.namespace(obj))
                except rclient.ApiError as e2:
                    if e2.not_found:
                        return "gone"
                    raise
                continue
            if conflicted:
                return "conflict"
            changed = objects.meta(written).get("resourceVersion") != objects.meta(obj).get("resourceVersion")
            return "rewritten" if changed else "unchanged"
        raise rclient.ApiError(409, "Conflict", f"still conflicting after {MAX_CONFLICT_RETRIES} attempts")

    async def _reap(
        self, pending: set[asyncio.Task[Outcome]], names: dict[asyncio.Task[Outcome], str]
    ) -> set[asyncio.Task[Outcome]]:
        done, still = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            name = names.pop(task)
            try:
                outcome = task.result()
            except rclient.ApiError as e:
                if e.status in (401, 403):
                    raise  # no right to write: every other object would fail the same way
                self.failures.append(f"{name}: {e}")
            else:
                self.counts[outcome] += 1
            self._report("rewriting")
        return still

    def _fill(self, result: MigrationResult) -> None:
        result.seen = self.counts["seen"]
        result.rewritten = self.counts["rewritten"]
        result.unchanged = self.counts["unchanged"]
        result.conflicts = self.counts["conflict"]
        result.gone = self.counts["gone"]

    def _report(self, phase: Phase, message: str = "") -> None:
        if self.progress is None:
            return
        c = self.counts
        self.progress(
            Progress(
                phase,
                seen=c["seen"],
                total=self.total,
                rewritten=c["rewritten"],
                unchanged=c["unchanged"],
                conflicts=c["conflict"],
                gone=c["gone"],
                failed=len(self.failures),
                message=message,
            )
        )

    # -- builtin ---------------------------------------------------------------------------------

    async def _builtin(self, crd: Obj, result: MigrationResult) -> None:
        svm_res = await self._svm_resource()
        first = await self.client.list(resource_of(crd), limit=1)
        count = len(first.get("items") or ()) + int(
            (first.get("metadata") or {}).get("remainingItemCount") or 0
        )
        try:
            svm = await self.client.create(svm_res, migration_manifest(crd))
        except rclient.ApiError as e:
            if e.status == 403:
                raise _NoBuiltin(f"not allowed to create {svm_res.group_resource}: {e.message}") from None
            raise
        name = objects.name(svm)
        log.info("storage migration of %s: created StorageVersionMigration %s", self.crd_name, name)
        loop = asyncio.get_running_loop()
        act_by = loop.time() + self.builtin_start_timeout
        while True:
            svm = await self.client.get(svm_res, name)
            state, message = migration_state(svm)
            self._report(
                "waiting", f"StorageVersionMigration {name}: {state}" + (f": {message}" if message else "")
            )
            if state in ("succeeded", "failed"):
                break
            if state == "pending" and loop.time() >= act_by and not await self._other_running(svm_res, svm):
                await self._forget(svm_res, name)
                raise _NoBuiltin(
                    f"{SVM_GROUP}/{SVM_VERSION} is served but no controller acted on StorageVersionMigration "
                    f"{name} within {self.builtin_start_timeout:.0f}s (kube-controller-manager without "
                    "--feature-gates=StorageVersionMigrator=true?); it was deleted"
                )
            await asyncio.sleep(self.poll_interval)
        result.method, result.migration, result.seen = "builtin", name, count
        result.rewritten = result.unchanged = result.conflicts = result.gone = None
        if state == "failed":
            result.stored_versions_after = stored_versions(
                await self.client.get(resources.CRD, self.crd_name)
            )
            raise MigrationError(f"StorageVersionMigration {name} failed: {message}", result)
        # the controller (1.35+) trims storedVersions itself when the CRD did not change meanwhile;
        # trimming here too is idempotent and covers a CRD that did change (but kept its storage version)
        result.stored_versions_after = await self._trim(result.storage_version)

    async def _svm_resource(self) -> rclient.Resource:
        try:
            return await self.client.resource_for(f"{SVM_GROUP}/{SVM_VERSION}", SVM_KIND)
        except rclient.ApiError as e:
            if e.not_found:
                raise _NoBuiltin(f"the server does not serve {SVM_GROUP}/{SVM_VERSION}") from None
            raise
        except LookupError:
            raise _NoBuiltin(f"the server serves no {SVM_KIND} in {SVM_GROUP}/{SVM_VERSION}") from None

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

    async def _trim(self, storage: str) -> list[str]:
        """Set ``status.storedVersions`` to ``[storage]`` (PUT of /status with the CRD's
        resourceVersion); refuse if the storage version changed since the migration began."""
        self._report("trimming")
        for _ in range(MAX_TRIM_RETRIES):
            crd = await self.client.get(resources.CRD, self.crd_name)
            now = storage_version(crd)
            if now != storage:
                raise MigrationError(
                    f"the storage version of {self.crd_name} changed from {storage} to {now} during the "
                    "migration; storedVersions left as they were: run it again"
                )
            if stored_versions(crd) == [storage]:
                return [storage]
            crd.setdefault("status", {})["storedVersions"] = [storage]
            try:
                written = await self.client.replace(resources.CRD, crd, subresource="status")
            except rclient.ApiError as e:
                if e.conflict:
                    continue
                raise
            return stored_versions(written)
        raise MigrationError(
            f"could not update {self.crd_name}/status: {MAX_TRIM_RETRIES} conflicts in a row"
        )


def _key(obj: Obj) -> str:
    ns = objects.namespace(obj)
    return f"{ns}/{objects.name(obj)}" if ns else objects.name(obj)
