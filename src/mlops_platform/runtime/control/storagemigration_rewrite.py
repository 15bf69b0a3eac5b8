"""The ``rewrite`` path of a storage migration (:mod:`~mlops_platform.runtime.control.storagemigration`):
every object of a CRD written back unchanged, so the API server re-encodes it at the storage version.

Contract:

- the objects are listed at the storage version in pages (``limit``/``continue``), each handed on
  once (by UID) even when an expired continue token (410) restarts the list;
- each is PUT back unchanged with its ``resourceVersion``, at most ``concurrency`` at once: an
  unchanged ``resourceVersion`` counts as ``unchanged`` (already stored at the storage version), a
  409 re-reads and PUTs again (``conflict``, up to :data:`MAX_CONFLICT_RETRIES` times), a 404 counts
  as ``gone``; a 401/403 ends the run at once, other errors are failures, and the run stops listing
  after :data:`MAX_FAILURES` of them;
- any failure raises :class:`~.storagemigration_report.MigrationError` once the writes in flight have
  ended; ``status.storedVersions`` is not touched here (the caller trims it after a clean run).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncGenerator
from typing import Literal

from mlops_platform.runtime import objects
from mlops_platform.runtime.control import storagemigration_report as report
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

__all__ = ["MAX_CONFLICT_RETRIES", "MAX_FAILURES", "Outcome", "Rewrite"]

log = logging.getLogger("mlops_platform.runtime.control.storagemigration")

#: PUTs of one object after 409 conflicts before it counts as failed
MAX_CONFLICT_RETRIES = 5
#: failed objects (other than conflicts and deletions) after which a rewrite stops early
MAX_FAILURES = 20

Outcome = Literal["rewritten", "unchanged", "conflict", "gone"]


@dataclasses.dataclass
class Rewrite:
    """One CRD's objects rewritten (see the module docstring); counts and failures go to ``tally``."""

    client: rclient.Client
    crd_name: str
    page_size: int
    concurrency: int
    tally: report.Tally

    async def run(self, crd: Obj, result: report.MigrationResult) -> None:
        result.method = "rewrite"
        res = report.resource_of(crd)
        pending: set[asyncio.Task[Outcome]] = set()
        names: dict[asyncio.Task[Outcome], str] = {}
        try:
            async with contextlib.aclosing(self._objects(res, result)) as listed:
                async for obj in listed:
                    while len(pending) >= self.concurrency:
                        pending = await self._reap(pending, names)
                    if len(self.tally.failures) >= MAX_FAILURES:
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
            self.tally.fill(result)
        if self.tally.failures:
            self.tally.failures.sort()  # by namespace/name, whatever order the concurrent writes ended in
            result.stored_versions_after = report.stored_versions(
                await self.client.get(resources.CRD, self.crd_name)
            )
            shown = "; ".join(self.tally.failures[:5])
            raise report.MigrationError(
                f"{len(self.tally.failures)} objects of {res.group_resource} could not be rewritten "
                f"(storedVersions left as they were): {shown}",
                result,
                list(self.tally.failures),
            )

    async def _objects(
        self, res: rclient.Resource, result: report.MigrationResult
    ) -> AsyncGenerator[Obj, None]:
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
            if token is None and self.tally.total is None:
                self.tally.total = len(page.get("items") or ()) + int(meta.get("remainingItemCount") or 0)
            for obj in page.get("items") or ():
                uid = objects.uid(obj) or _key(obj)
                if uid in done:
                    continue
                done.add(uid)
                self.tally.counts["seen"] += 1
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
                self.tally.failures.append(f"{name}: {e}")
            else:
                self.tally.counts[outcome] += 1
            self.tally.report("rewriting")
        return still


def _key(obj: Obj) -> str:
    ns = objects.namespace(obj)
    return f"{ns}/{objects.name(obj)}" if ns else objects.name(obj)
