"""The command's I/O around ``why``: connect, read, analyze (:func:`collect`), and how the CLI
prints (:func:`use_color`, :func:`terminal_width`).

Contract: every failure to report (no such InferenceService, no access to it, no API server) is one
:class:`WhyError` whose message says why, and a kubeconfig that cannot be used one
:class:`~mlops_platform.runtime.transport.kubeconfig.KubeconfigError` (the command names its flag);
reads of anything else that fail are in the report
(:attr:`~mlops_platform.why.report.Report.errors`), not raised.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

from mlops_platform import promapi
from mlops_platform.controllers.inferenceservice.children import base, monitoring
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.why import analysis, health, reading, report


class WhyError(Exception):
    """``why`` could not report (no such object, no access, no cluster): the message says why."""


def use_color(stream: Any) -> bool:
    """Colour only on a terminal, and never when ``NO_COLOR`` is set (no-color.org)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and not os.environ.get("NO_COLOR")


def terminal_width() -> int:
    """The terminal's width (``$COLUMNS`` first; 100 when not a terminal)."""
    return shutil.get_terminal_size((100, 24)).columns


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context (``default`` without one), as ``kubectl`` picks it;
    :class:`~mlops_platform.runtime.transport.kubeconfig.KubeconfigError` when it cannot be used."""
    from mlops_platform.runtime.transport import kubeconfig as rkubeconfig

    return str(rkubeconfig.load(kubeconfig or None, context).namespace)


async def collect(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    name: str,
    ctx: base.BuildContext,
    *,
    max_events: int = analysis.MAX_EVENTS,
    prometheus: promapi.Server | None = promapi.DEFAULT,
) -> report.Report:
    """Connect (``kubeconfig``/``context``; default ``$KUBECONFIG``), read and analyze; ask
    ``prometheus`` (None: none) about an InferenceService with monitoring."""
    ns = namespace or default_namespace(kubeconfig, context)
    client = rclient.Client.from_kubeconfig(kubeconfig, context=context)
    async with client:
        try:
            snap, found = await _read(client, ns, name, prometheus)
        except reading.NotFound as e:
            raise WhyError(str(e)) from None
        except rclient.ApiError as e:
            raise WhyError(
                f"reading inferenceservice {ns}/{name}: {e.status} {e.reason}: {e.message}"
            ) from None
        except rclient.TransportError as e:
            raise WhyError(f"cannot reach the API server at {client.base_url}: {e}") from None
    return analysis.analyze(snap, ctx, max_events=max_events, health=found)


async def _read(
    client: rclient.Client, ns: str, name: str, prometheus: promapi.Server | None
) -> tuple[reading.Snapshot, report.HealthReport | None]:
    """The snapshot, and what Prometheus says (asked beside it, not after: kept only for a monitored
    InferenceService)."""
    asked = asyncio.create_task(health.read(client, prometheus, ns, name)) if prometheus else None
    try:
        snap = await reading.read(client, ns, name)
        return snap, await asked if asked is not None and _monitored(snap, name) else None
    finally:
        if asked is not None and not asked.done():
            asked.cancel()


def _monitored(snap: reading.Snapshot, name: str) -> bool:
    """Whether the InferenceService has a live PrometheusRule or ServiceMonitor."""
    kinds = (monitoring.PROMETHEUS_RULE, monitoring.SERVICE_MONITOR)
    return any(snap.children.get((reading.group_resource(k), name)) for k in kinds)
