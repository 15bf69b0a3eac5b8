"""Answers of a throttled API server: priority and fairness answers ``429`` in plain text with only
a ``Retry-After`` header (no Status body). Regressions found by the throttling scenario
(``tests/reliability/test_throttling.py``):

- a watch is never retried by the client, so the reflector must find the server's Retry-After on
  the error: it waited a fixed 1 s, whatever the server asked for;
- the error's reason was the HTTP reason phrase ("Too Many Requests"), which the reconciler puts in
  the ``Reconciled`` condition: the API server refused that status (422, a reason takes no spaces),
  so a throttled apply was never reported and the reconcile failed on its status write too.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable

import msgspec
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from mlops_platform import api
from mlops_platform.api import isvc_status
from mlops_platform.controllers.inferenceservice import status
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime.caching import informer
from mlops_platform.runtime.clock import FakeClock
from mlops_platform.runtime.observability import metrics as rmetrics
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes, isvc, wait

#: what kube-apiserver's priority and fairness filter writes for a rejected request
APF_BODY = b"Too many requests, please try again later.\n"

Handler = Callable[[web.Request], web.Response]
CTX = base.BuildContext()


@contextlib.asynccontextmanager
async def served(handler: Handler) -> AsyncIterator[rclient.Client]:
    """A Client talking HTTP to a server on 127.0.0.1 answering with ``handler``."""

    async def route(request: web.Request) -> web.Response:
        return handler(request)

    async with fakes.http_api(route) as client:
        yield client


def throttled(seconds: str) -> web.Response:
    return web.Response(
        status=429, body=APF_BODY, content_type="text/plain", headers={"Retry-After": seconds}
    )


async def test_a_plain_text_429_carries_the_servers_retry_after_on_the_error() -> None:
    async with served(lambda request: throttled("7")) as c:
        try:
            async for _ in c.watch(resources.CONFIG_MAP, "ns", resource_version="1"):
                pass
        except rclient.ApiError as e:
            error = e
    assert error.status == 429
    assert error.body["details"]["retryAfterSeconds"] == 7.0
    assert error.reason == "TooManyRequests"  # the API's name, as client-go's, not "Too Many Requests"
    assert "Too many requests" in error.message


async def test_a_plain_text_error_has_a_reason_a_condition_takes() -> None:
    """The status the reconciler computes for a failed apply (``status.compute``: Ready and
    Reconciled False, the error's reason) is valid for the CRD's schema, whatever the answer's body."""
    codes = {"429": 429, "502": 502, "503": 503, "418": 418}

    def handler(request: web.Request) -> web.Response:
        code = codes[request.path.rsplit("/", 1)[1]]
        return web.Response(status=code, body=b"no Status here\n", content_type="text/plain")

    obj = api.decode(
        isvc.manifest("m", metadata={"uid": "u", "generation": 1}, modelUri="s3://m/1", framework="triton")
    )
    reasons = []
    async with served(handler) as c:
        c._max_retries = 0  # the error as the client raises it once its retries are spent
        for name in codes:
            try:
                await c.get(resources.CONFIG_MAP, name, "ns")
            except rclient.ApiError as e:
                reasons.append(e.reason)
                failed = status.compute(obj, {}, [], [status.Failure("apply Deployment", e)], None, CTX)
                for cond in failed["conditions"]:
                    msgspec.convert(cond, isvc_status.Condition)  # raises on what the API server refuses
    assert reasons == ["TooManyRequests", "BadGateway", "ServiceUnavailable", "IMATeapot"]


async def test_a_status_body_keeps_its_own_retry_after_and_others_get_none() -> None:
    status = {"kind": "Status", "code": 429, "reason": "TooManyRequests", "details": {"retryAfterSeconds": 3}}

    def handler(request: web.Request) -> web.Response:
        if request.path.endswith("/own"):
            return web.Response(
                status=429,
                body=json.dumps(status),
                content_type="application/json",
                headers={"Retry-After": "9"},
            )
        return web.Response(status=403, body=json.dumps({"kind": "Status", "reason": "Forbidden"}))

    errors = []
    async with served(handler) as c:
        c._max_retries = 0  # the error as the client would raise it once its retries are spent
        for name in ("own", "other"):
            try:
                await c.get(resources.CONFIG_MAP, name, "ns")
            except rclient.ApiError as e:
                errors.append(e)
    assert errors[0].body["details"] == {"retryAfterSeconds": 3}  # the Status says it already
    assert "details" not in errors[1].body  # no Retry-After, nothing made up


async def test_the_informer_waits_the_servers_retry_after_before_watching_again() -> None:
    watches: list[str] = []

    def handler(request: web.Request) -> web.Response:
        if request.query.get("watch") != "true":
            listed = {"kind": "ConfigMapList", "metadata": {"resourceVersion": "10"}, "items": []}
            return web.Response(body=json.dumps(listed), content_type="application/json")
        watches.append(request.query.get("resourceVersion", ""))
        if len(watches) <= 2:
            return throttled("7")
        return web.Response(body=b"", content_type="application/json")  # ends at once: watched again

    clock = FakeClock()
    async with served(handler) as c:
        inf = informer.Informer(c, resources.CONFIG_MAP, namespace="ns", resync_period=0, clock=clock)
        inf.start()
        waits: list[float] = []
        try:
            for failed in (1, 2):

                def sleeping(failed: int = failed) -> bool:
                    return inf.failures == failed and clock.pending_timers() == 1

                await wait.until(
                    sleeping,
                    timeout=5,
                    interval=0.001,
                    what=f"the wait after throttled watch {failed}",
                )
                deadline = clock.next_deadline()
                assert deadline is not None
                waits.append(deadline - clock.now())
                clock.step(waits[-1] - 0.01)
                assert len(watches) == failed  # not watched again before Retry-After
                clock.step(0.02)
            await wait.until(lambda: len(watches) >= 3, timeout=5, interval=0.001, what="watched again")
        finally:
            await inf.stop()
    assert waits == pytest.approx([7.0, 7.0])
    assert watches[:3] == ["10", "10", "10"]  # resumed where the LIST left off: nothing re-listed
    assert inf.relists == 1


async def test_retries_after_retry_after_are_counted_as_client_gos_retries_metric() -> None:
    """``rest_client_request_retries_total{code,method,host}`` counts every answer the client sends
    again after its Retry-After (what shows a squeeze even when no reconcile fails), not the last."""
    answers = [throttled("0"), throttled("0")]

    def handler(request: web.Request) -> web.Response:
        if answers:
            return answers.pop(0)
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": "x"}})

    async with served(handler) as c:
        metrics = rmetrics.Metrics(CollectorRegistry())
        metrics.observe_client(c)
        await c.get(resources.CONFIG_MAP, "x", "ns")
        host = c.base_url.split("://", 1)[1]
        retries = metrics.registry.get_sample_value(
            "rest_client_request_retries_total", {"code": "429", "method": "GET", "host": host}
        )
        requests = metrics.registry.get_sample_value(
            "rest_client_requests_total", {"code": "429", "method": "GET", "host": host}
        )
        answered = metrics.registry.get_sample_value(
            "rest_client_requests_total", {"code": "200", "method": "GET", "host": host}
        )
    assert (retries, requests, answered) == (2.0, 2.0, 1.0)
