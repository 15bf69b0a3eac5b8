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

This module holds :func:`migrate` and the trim; the paths live next to it:
:mod:`~.storagemigration_rewrite`, :mod:`~.storagemigration_builtin`, and what they read and report
(the CRD's versions, :class:`Progress`, :class:`MigrationResult`, :class:`MigrationError`):
:mod:`~.storagemigration_report`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Literal

from mlops_platform.runtime.control import storagemigration_builtin as builtin
from mlops_platform.runtime.control import storagemigration_report as report
from mlops_platform.runtime.control import storagemigration_rewrite as rewrite
from mlops_platform.runtime.control.storagemigration_report import MigrationError, MigrationResult
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

__all__ = ["MAX_TRIM_RETRIES", "METHODS", "Method", "migrate"]

log = logging.getLogger("mlops_platform.runtime.control.storagemigration")

Method = Literal["auto", "builtin", "rewrite"]
METHODS: tuple[Method, ...] = ("auto", "builtin", "rewrite")

#: status PUTs of the CRD after 409 conflicts
MAX_TRIM_RETRIES = 5


async def migrate(
    client: rclient.Client,
    crd_name: str,
    *,
    method: Method = "auto",
    progress: report.ProgressCallback | None = None,
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


@dataclasses.dataclass
class _Migration:
    client: rclient.Client
    crd_name: str
    method: Method
    progress: report.ProgressCallback | None
    page_size: int
    concurrency: int
    builtin_start_timeout: float
    poll_interval: float
    tally: report.Tally = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.tally = report.Tally(self.progress)

    async def run(self) -> MigrationResult:
        crd = await self.client.get(resources.CRD, self.crd_name)
        storage = report.storage_version(crd)
        stored = report.stored_versions
        result = MigrationResult(self.crd_name, "none", storage, stored(crd), stored(crd))
        if not report.needs_migration(crd):
            return result
        if self.method in ("auto", "builtin"):
            try:
                await builtin.Builtin(
                    self.client, self.crd_name, self.builtin_start_timeout, self.poll_interval, self.tally
                ).run(crd, result)
            except builtin.NoBuiltin as e:
                if self.method == "builtin":
                    raise MigrationError(f"the builtin migration cannot run: {e}", result) from None
                log.info("storage migration of %s: builtin not used (%s); rewriting", self.crd_name, e)
                result.fallback_reason = str(e)
            else:
                # the controller (1.35+) trims storedVersions itself when the CRD did not change
                # meanwhile; trimming here too is idempotent and covers a CRD that did change (but
                # kept its storage version)
                result.stored_versions_after = await self._trim(result.storage_version)
                return result
        await rewrite.Rewrite(self.client, self.crd_name, self.page_size, self.concurrency, self.tally).run(
            crd, result
        )
        result.stored_versions_after = await self._trim(result.storage_version)
        return result

    async def _trim(self, storage: str) -> list[str]:
        """Set ``status.storedVersions`` to ``[storage]`` (PUT of /status with the CRD's
        resourceVersion); refuse if the storage version changed since the migration began."""
        self.tally.report("trimming")
        for _ in range(MAX_TRIM_RETRIES):
            crd = await self.client.get(resources.CRD, self.crd_name)
            now = report.storage_version(crd)
            if now != storage:
                raise MigrationError(
                    f"the storage version of {self.crd_name} changed from {storage} to {now} during the "
                    "migration; storedVersions left as they were: run it again"
                )
            if report.stored_versions(crd) == [storage]:
                return [storage]
            crd.setdefault("status", {})["storedVersions"] = [storage]
            try:
                written = await self.client.replace(resources.CRD, crd, subresource="status")
            except rclient.ApiError as e:
                if e.conflict:
                    continue
                raise
            return report.stored_versions(written)
        raise MigrationError(
            f"could not update {self.crd_name}/status: {MAX_TRIM_RETRIES} conflicts in a row"
        )
