"""Probes of live objects for tests: does it exist, what does its condition say. Combine them with
:func:`mlops_platform.testing.wait.until` (never sleep to synchronise)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlops_platform.runtime import objects
from mlops_platform.runtime.transport import client as rclient


def condition(obj: Mapping[str, Any] | None, type_: str) -> dict[str, Any]:
    """The ``status.conditions`` entry of ``type_`` (:func:`mlops_platform.runtime.objects.condition`),
    or an empty dict when there is none, so ``condition(obj, "Ready").get("status")`` just works."""
    return objects.condition(obj, type_) or {}


async def get_or_none(
    client: rclient.Client, resource: rclient.Resource, namespace: str | None, name: str
) -> dict[str, Any] | None:
    """The object ``name``, or None when there is none (a 404; any other error propagates)."""
    try:
        return await client.get(resource, name, namespace)
    except rclient.ApiError as e:
        if e.not_found:
            return None
        raise


async def exists(
    client: rclient.Client, resource: rclient.Resource, namespace: str | None, name: str
) -> bool:
    """Whether ``name`` exists (a 404 is False; any other error propagates)."""
    return await get_or_none(client, resource, namespace, name) is not None


async def absent(
    client: rclient.Client, resource: rclient.Resource, namespace: str | None, name: str
) -> bool:
    """Whether ``name`` is gone (the negation of :func:`exists`)."""
    return not await exists(client, resource, namespace, name)
