"""The PromQL of a canary analysis' checks over one step's window (pure): the same expressions as
the InferenceService's PrometheusRule (:mod:`.alert_queries`, per metrics dialect), selected by the
component label for the candidate (``canary``) and the stable model (``predictor``), with the step's
interval as the rate window; and the custom queries with their ``$(variables)`` replaced.

- ``requests`` (candidate): the request rate of the KEDA trigger and the canary alert's guard
  (:meth:`.alert_queries.Server.requests`); times the window it is the step's request count;
- ``errorRatio``: the candidate's ratio of ``InferenceServiceHighErrorRatio``, 0 where it served
  requests and has no failure series yet (:meth:`~.alert_queries.Server.served_error_ratio`: a
  healthy MLServer or TorchServe has none); the stable's as the canary alert's baseline
  (:meth:`~.alert_queries.Server.error_baseline`: no ratio counts as 0);
- ``latency``: each latency value of ``InferenceServiceHighLatency``
  (:meth:`~.alert_queries.Server.latencies`) with the check's quantile, for the candidate and, for
  a relative bound, the stable model.

A runtime whose dialect has no request metrics (``none``) cannot have built-in checks nor a request
minimum: :func:`step_queries` raises :class:`Unavailable` (the analysis then fails, saying so).

:func:`measure` asks Prometheus (:class:`mlops_platform.promclient.QueryClient`) for a step's queries
at once and gives the state machine its :class:`~.analysis_checks.Sample`, or
:class:`~.analysis_checks.Unreachable` when Prometheus did not answer one of them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Sequence
from typing import Protocol

from mlops_platform import promapi, promclient
from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import alert_queries, alert_settings, alerts
from mlops_platform.controllers.inferenceservice import analysis_checks as checks


class Unavailable(ValueError):
    """The built-in checks need request metrics the runtime's dialect does not have."""


@dataclasses.dataclass(frozen=True, slots=True)
class PromQuery:
    """One instant query: its value is ``(check, side)`` of the step's :class:`~.analysis_checks.Sample`."""

    check: str
    side: str
    expr: str


def _expand(query: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\(([A-Za-z]+)\)", lambda m: variables.get(m.group(1), m.group(0)), query)


def step_queries(
    a: internal.Analysis, step: internal.AnalysisStep, *, namespace: str, name: str, dialect: str
) -> tuple[PromQuery, ...]:
    """The queries of ``a``'s checks over ``step``'s window, for the InferenceService ``namespace/name``
    whose runtime exports the metrics ``dialect`` (the runtime table's ``metricsDialect``)."""
    q = alerts.request_query(namespace, name, step.interval)
    candidate = q.component(alert_settings.CANARY_COMPONENT)
    stable = q.component(alert_settings.STABLE_COMPONENT)
    out: list[PromQuery] = []
    builtin = a.min_requests > 0 or a.error_ratio is not None or a.latency is not None
    server = alert_queries.SERVERS.get(dialect)
    if builtin and server is None:
        raise Unavailable(
            f"the runtime's metrics dialect {dialect!r} has no request metrics the operator knows: only "
            "custom queries, with minRequests 0, can judge its canary"
        )
    if server is not None and a.min_requests > 0:
        out.append(PromQuery(checks.REQUESTS, checks.CANDIDATE, server.requests(candidate)))
    if server is not None and a.error_ratio is not None:
        out.append(PromQuery(checks.ERROR_RATIO, checks.CANDIDATE, server.served_error_ratio(candidate)))
        if a.error_ratio.max_above_stable is not None:
            out.append(PromQuery(checks.ERROR_RATIO, checks.STABLE, server.error_baseline(stable)))
    if server is not None and a.latency is not None:
        sides = [(checks.CANDIDATE, candidate)]
        if a.latency.max_times_stable is not None:
            sides.append((checks.STABLE, stable))
        for side, query in sides:
            out += [PromQuery(checks.LATENCY, side, v) for v in server.latencies(query, a.latency.quantile)]
    variables = {
        "namespace": namespace,
        "name": name,
        "selector": candidate.sel,
        "stableSelector": stable.sel,
        "window": step.interval,
    }
    out += [PromQuery(c.name, checks.QUERY, _expand(c.query, variables)) for c in a.queries]
    return tuple(out)


class Querier(Protocol):
    """What :func:`measure` needs of a :class:`~mlops_platform.promclient.QueryClient`."""

    async def query(self, promql: str) -> list[promapi.Sample]: ...


async def measure(
    client: Querier,
    a: internal.Analysis,
    step: internal.AnalysisStep,
    *,
    namespace: str,
    name: str,
    dialect: str,
) -> checks.Sample | checks.Unreachable:
    """The values of ``step``'s window: every query at once, each within the client's deadline."""
    try:
        queries = step_queries(a, step, namespace=namespace, name=name, dialect=dialect)
    except Unavailable as e:
        return checks.Sample({}, invalid={checks.REQUESTS: str(e)})
    return sample_of(
        queries, await asyncio.gather(*(client.query(q.expr) for q in queries), return_exceptions=True)
    )


def sample_of(
    queries: Sequence[PromQuery], answers: Sequence[list[promapi.Sample] | BaseException]
) -> checks.Sample | checks.Unreachable:
    """The answers to ``queries`` as a sample: NaN is no value (0/0: no request in the window), a
    custom query giving several series cannot be judged, and one query without an answer means
    nothing was measured."""
    values: dict[tuple[str, str], tuple[float, ...]] = {}
    invalid: dict[str, str] = {}
    failed: dict[str, str] = {}
    for q, answer in zip(queries, answers, strict=True):
        if isinstance(answer, promclient.QueryError):
            if answer.kind == promclient.UNREACHABLE:
                return checks.Unreachable(str(answer))
            (invalid if answer.kind == promclient.INVALID else failed)[q.check] = str(answer)
        elif isinstance(answer, BaseException):
            raise answer
        elif q.side == checks.QUERY and len(answer) > 1:
            invalid[q.check] = f"gives {len(answer)} series, not one value: aggregate them (sum, max, ...)"
        else:
            found = tuple(s.value for s in promapi.finite(answer))
            values[(q.check, q.side)] = values.get((q.check, q.side), ()) + found
    return checks.Sample(values, invalid, failed)
