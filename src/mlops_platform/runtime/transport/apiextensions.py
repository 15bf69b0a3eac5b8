"""Install CustomResourceDefinitions: server-side apply, then wait until the API serves them."""

from __future__ import annotations

from typing import Any

from mlops_platform.runtime import objects, wait
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources


def established(crd: dict[str, Any]) -> bool:
    """The CRD is Established (its REST endpoints are served) and not being deleted."""
    return not objects.deleting(crd) and objects.condition_is(crd, "Established")


async def install(
    c: rclient.Client, manifests: list[dict[str, Any]], *, field_manager: str, timeout: float = 60.0
) -> list[dict[str, Any]]:
    """Apply every CRD (idempotent), wait until each is Established, refresh discovery; return them."""
    for manifest in manifests:
        await c.apply(resources.CRD, manifest, field_manager=field_manager)
    live = [await _established(c, objects.name(m), timeout) for m in manifests]
    c.forget_discovery()
    return live


async def _established(c: rclient.Client, name: str, timeout: float) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        crd = await c.get(resources.CRD, name)
        return crd if established(crd) else None

    # a failing GET right after a successful apply (403, 404) is an error to report, not to wait out
    return await wait.until(probe, timeout=timeout, what=f"CRD {name} Established", retry_on=())


async def uninstall(c: rclient.Client, names: list[str], *, timeout: float = 60.0) -> None:
    """Delete the CRDs (and with them every object of their kinds); wait until they are gone."""
    for name in names:
        try:
            await c.delete(resources.CRD, name)
        except rclient.ApiError as e:
            if not e.not_found:
                raise
    for name in names:

        async def gone(name: str = name) -> bool:
            try:
                await c.get(resources.CRD, name)
            except rclient.ApiError as e:
                if e.not_found:
                    return True
                raise
            return False

        await wait.until(gone, timeout=timeout, what=f"CRD {name} deleted", retry_on=())
    c.forget_discovery()
