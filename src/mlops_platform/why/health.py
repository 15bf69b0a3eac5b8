"""Is it healthy: what Prometheus says of an InferenceService with monitoring, for ``why``.

:func:`read` asks the Prometheus :class:`~mlops_platform.promapi.Server` (through the API server's
service proxy, read-only) for the alerting rules of the InferenceService's rule group
(``mlops-platform.<namespace>.<name>``, ``alerts.group_name``) and the targets of its
ServiceMonitor's scrape pool; :func:`to_report` (pure) turns the answers into a
:class:`~mlops_platform.why.report.HealthReport`: each alert's state (firing first), each target's
health and last scrape error. Contract:

- shown only when the InferenceService has a live PrometheusRule or ServiceMonitor (monitoring on;
  ``why`` asks beside its other reads, not after them);
- a Prometheus that cannot be read (none installed, no ready pod, RBAC) is the report's ``error``,
  never a failure of ``why``;
- a group Prometheus has not loaded (yet) is ``loaded=False``: its alerts cannot fire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from mlops_platform import promapi
from mlops_platform.controllers.inferenceservice import alert_settings, alerts
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.why import report

#: alert states, the worst first
_ORDER = {"firing": 0, "pending": 1, "inactive": 2}


async def read(c: rclient.Client, server: promapi.Server, namespace: str, name: str) -> report.HealthReport:
    group = alerts.group_name(namespace, name)
    try:
        rules, targets = await asyncio.gather(
            promapi.alert_rules(c, server, group),
            promapi.targets(c, server, promapi.service_monitor_pool(namespace, name)),
        )
    except promapi.PrometheusError as e:
        return report.HealthReport(str(server), group, loaded=False, error=str(e))
    return to_report(str(server), group, rules, targets)


def to_report(
    server: str, group: str, rules: Sequence[Obj] | None, targets: Sequence[Obj]
) -> report.HealthReport:
    """The rules of ``group`` (None: not loaded) and the scrape pool's targets as Prometheus answered."""
    alert_reports = [_alert(r) for r in rules or ()]
    alert_reports.sort(key=lambda a: (_ORDER.get(a.state, 3), a.name))
    target_reports = sorted((_target(t) for t in targets), key=lambda t: t.pod)
    return report.HealthReport(
        server, group, loaded=rules is not None, alerts=tuple(alert_reports), targets=tuple(target_reports)
    )


def _alert(rule: Obj) -> report.AlertReport:
    active = list(rule.get("alerts") or ())
    first = active[0] if active else {}
    return report.AlertReport(
        name=str(rule.get("name", "")),
        state=str(rule.get("state", "inactive")),
        severity=str((rule.get("labels") or {}).get("severity", "")),
        since=str(first.get("activeAt", "")),
        value=str(first.get("value", "")),
        summary=str((first.get("annotations") or {}).get("summary", "")),  # an active alert's
    )


def _target(target: Obj) -> report.TargetReport:
    found = target.get("labels") or {}
    return report.TargetReport(
        pod=str(found.get("pod", target.get("scrapeUrl", ""))),
        component=str(found.get(alert_settings.COMPONENT_LABEL, "")),
        health=str(target.get("health", "unknown")),
        last_error=str(target.get("lastError", "")),
        last_scrape=str(target.get("lastScrape", "")),
    )
