"""Wait on conditions with timeouts: :func:`mlops_platform.runtime.wait.until`, for tests, and
:func:`for_condition`, a wait on an object's status condition."""

from __future__ import annotations

from typing import Any

from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.wait import until
from mlops_platform.testing import probes

__all__ = ["for_condition", "until"]


async def for_condition(
    client: rclient.Client,
    resource: rclient.Resource,
    namespace: str | None,
    name: str,
    type_: str,
    status: str,
    reason: str | None = None,
    *,
    timeout: float = 90.0,
) -> dict[str, Any]:
    """Wait until the condition ``type_`` of ``name`` has ``status`` (and ``reason``, when given) in a
    status that observed the object's current generation; return the object."""

    async def probe() -> dict[str, Any] | None:
        obj = await client.get(resource, name, namespace)
        cond = probes.condition(obj, type_)
        ok = cond.get("status") == status and (reason is None or cond.get("reason") == reason)
        current = (obj.get("status") or {}).get("observedGeneration") == obj["metadata"].get("generation")
        return obj if ok and current else None

    what = f"{resource.kind} {name} {type_}={status}" + (f"/{reason}" if reason else "")
    return await until(probe, timeout=timeout, what=what)
