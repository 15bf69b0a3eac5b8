"""The operator in the test's own process, with admin (or any given) credentials: the manager and
the InferenceService controller, started, ready, and stopped on exit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from mlops_platform.controllers.inferenceservice import controller
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import wait


@contextlib.asynccontextmanager
async def running(
    client: rclient.Client,
    *,
    namespace: str | None = None,
    settings: base.BuildContext | None = None,
    workers: int = 4,
    what: str = "operator ready",
) -> AsyncIterator[rmanager.Manager]:
    """A manager on ``client`` (watching ``namespace``, default all) with the controller set up,
    once it reports ready and the informers of every served optional kind have listed (on a fresh
    cluster the API server serves a just-established CRD a moment later: a test's first object would
    otherwise get its ServiceMonitor inside the test's window); stopped (in-flight reconciles
    finished) when the block exits."""
    options = rmanager.Options(namespace=namespace, health_probe_address=None, metrics_address=None)
    mgr = rmanager.Manager(client, options)
    controller.setup(mgr, workers=workers, settings=settings)
    task = asyncio.create_task(mgr.run())
    try:
        await wait.until(mgr.is_ready, timeout=60, what=what)
        await wait.until(mgr.optional_kinds.all_synced, timeout=60, what=f"{what}: optional kinds listed")
        yield mgr
    finally:
        mgr.stop()
        await asyncio.wait_for(task, 60)
