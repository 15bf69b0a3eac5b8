"""What a storage migration (:mod:`~mlops_platform.runtime.control.storagemigration`) reads and
reports: a CRD's storage version and ``status.storedVersions``, the REST resource of its objects,
the progress handed to the caller, the result, and the error.

Contract:

- :func:`storage_version` is the one version with ``storage: true`` (another count is a
  :class:`MigrationError`); :func:`needs_migration` is whether ``status.storedVersions`` lists
  anything but it. Pure: no request.
- :class:`Tally` holds a run's counts (each object once), its failures (``namespace/name: error``)
  and the list's announced size; :meth:`Tally.report` hands a :class:`Progress` snapshot of them to
  the caller's callback, :meth:`Tally.fill` copies them into the :class:`MigrationResult`.
- A :class:`MigrationError` means ``status.storedVersions`` was not trimmed; its ``result`` holds the
  counts so far.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal

from mlops_platform.runtime import objects
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient

__all__ = [
    "MethodUsed",
    "MigrationError",
    "MigrationResult",
    "Phase",
    "Progress",
    "ProgressCallback",
    "Tally",
    "needs_migration",
    "resource_of",
    "storage_version",
    "stored_versions",
]

MethodUsed = Literal["none", "builtin", "rewrite"]
Phase = Literal["rewriting", "waiting", "trimming"]


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


@dataclasses.dataclass
class Tally:
    """A run's counts, failures and list size, reported as :class:`Progress` to ``progress``."""

    progress: ProgressCallback | None
    counts: dict[str, int] = dataclasses.field(
        default_factory=lambda: dict.fromkeys(("seen", "rewritten", "unchanged", "conflict", "gone"), 0)
    )
    failures: list[str] = dataclasses.field(default_factory=list)
    total: int | None = None

    def fill(self, result: MigrationResult) -> None:
        result.seen = self.counts["seen"]
        result.rewritten = self.counts["rewritten"]
        result.unchanged = self.counts["unchanged"]
        result.conflicts = self.counts["conflict"]
        result.gone = self.counts["gone"]

    def report(self, phase: Phase, message: str = "") -> None:
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
