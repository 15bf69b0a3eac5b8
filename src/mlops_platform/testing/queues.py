"""What a controller has queued, for unit tests that run no worker: :func:`drain` takes every
request out of its queue and returns them sorted (so a test compares sets of requests)."""

from __future__ import annotations

from mlops_platform.runtime.control import controller as rcontroller
from mlops_platform.runtime.control.reconcile import Request


async def drain(ctrl: rcontroller.Controller) -> list[Request]:
    """Every request queued in ``ctrl`` now, taken out and marked done, sorted."""
    out = []
    while len(ctrl.queue):
        item = await ctrl.queue.get()
        ctrl.queue.done(item)
        out.append(item)
    return sorted(out)
