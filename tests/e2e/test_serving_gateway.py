"""Canary rollouts through a real Gateway API implementation (issue #38): the operator's
``gateway-api`` router writes the HTTPRoute, Traefik (:mod:`mlops_platform.devcluster.gateway`, on
the real node) routes every request by it. Version 1 of the demo iris model answers [1, 1] to the
quickstart input, version 2 (the canary) [2, 2], so every answer says who served it.

Requests go through the Gateway as its clients send them (:mod:`mlops_platform.testing.gatewayroute`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import pytest

from mlops_platform import api, infer
from mlops_platform.controllers.inferenceservice.children import base, httproute
from mlops_platform.devcluster import demo, gateway
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import gatewayroute, probes, serving, wait

STABLE, CANARY = [1, 1], [2, 2]
REQUESTS = 1000
SHARE = 0.2


@pytest.fixture(scope="module")
async def serving_settings(local_cluster_name: str) -> base.BuildContext:
    """The Gateway (Traefik) installed and the local cluster's settings routing through it (``ns``
    and its operator: tests/e2e/conftest)."""
    await asyncio.to_thread(gateway.install, local_cluster_name)
    return dataclasses.replace(
        demo.local_settings(), router=base.Router("gateway-api"), gateway=gateway.GATEWAY
    )


async def canary_routed(c: rclient.Client, ns: str, name: str) -> gatewayroute.Route:
    """``name`` created with a canary of version 2 and Ready; then the canary is Ready, the HTTPRoute
    carries its weight and Traefik accepted it, and requests through the Gateway reach both
    versions. Traefik applies a route some time after accepting it, and a backend whose endpoints it
    has not seen ready yet is down for it (the other takes every request): with both components'
    pods started together, the canary alone answered for ~10 s."""
    await c.create(api.RESOURCE, serving.iris(name, canary="s3://models/iris/2"), ns)
    await serving.ready(c, ns, name)

    async def split() -> bool:
        live = await c.get(api.RESOURCE, name, ns)
        canary = probes.condition(live, "CanaryReady")
        routed = probes.condition(live, httproute.CONDITION)
        return (
            canary.get("status") == "True"
            and canary.get("reason") == "Canary"
            and routed.get("status") == "True"
            and f"accepted by Gateway {gateway.GATEWAY}" in routed.get("message", "")
        )

    await wait.until(split, timeout=serving.READY_TIMEOUT, what="CanaryReady=True/Canary, route accepted")
    route = await gatewayroute.route_of(c, ns, name)

    async def both_answer() -> bool:
        answers = []
        for _ in range(10):  # 1 in 5 is the canary's under Traefik's weighted round robin
            with contextlib.suppress(infer.InferError):
                answers.append(await gatewayroute.send(c, route))
        return STABLE in answers and CANARY in answers

    await wait.until(both_answer, timeout=60, what="both versions answering through the Gateway")
    return route


async def test_a_20_percent_canary_behind_traefik_answers_its_share_and_promotes_under_load(
    admin_client: rclient.Client, ns: str
) -> None:
    route = await canary_routed(admin_client, ns, "iris")
    answers = [await gatewayroute.send(admin_client, route) for _ in range(REQUESTS)]
    canary = answers.count(CANARY)
    low, high = serving.binomial_interval(REQUESTS, SHARE)
    print(f"canary share through Traefik: {canary} of {REQUESTS}, 99.999 % interval [{low:.1f}, {high:.1f}]")
    assert answers.count(STABLE) + canary == REQUESTS, {tuple(a) for a in answers}
    assert low <= canary <= high, f"{canary} of {REQUESTS} from the canary, not in [{low:.0f}, {high:.0f}]"

    async with serving.load(
        admin_client, ns, "iris", lambda: gatewayroute.send(admin_client, route)
    ) as traffic:
        await traffic.more(10)
        await admin_client.patch(api.RESOURCE, "iris", serving.promotion("s3://models/iris/2"), namespace=ns)
        # the canary goes once the stable component serves version 2 (then the old pods go)
        await wait.until(
            lambda: _canary_gone(admin_client, ns), timeout=serving.READY_TIMEOUT, what="canary gone"
        )
        await serving.until_rolled_out(admin_client, ns, "iris", "s3://models/iris/2")
        after = await traffic.then(30)
    print(f"promotion under load: {traffic.summary()} ({len(traffic.answers)} answered)")
    assert all(a == CANARY for a in after), "version 1 answered after the promotion"
    assert traffic.errors == [], traffic.summary()


async def test_a_rollback_behind_traefik_under_load_fails_no_request(
    admin_client: rclient.Client, ns: str
) -> None:
    route = await canary_routed(admin_client, ns, "iris")
    async with serving.load(
        admin_client, ns, "iris", lambda: gatewayroute.send(admin_client, route)
    ) as traffic:
        await traffic.more(10)
        await admin_client.patch(api.RESOURCE, "iris", {"spec": {"canary": None}}, namespace=ns)
        await wait.until(lambda: _canary_gone(admin_client, ns), timeout=120, what="the canary gone")
        after = await traffic.then(30)
    print(f"rollback under load: {traffic.summary()} ({len(traffic.answers)} answered)")
    assert traffic.errors == [], traffic.summary()
    assert all(a == STABLE for a in after), "the canary answered after the rollback"


async def _canary_gone(c: rclient.Client, ns: str) -> bool:
    """The canary's Deployment and pods are gone and the HTTPRoute routes to the predictor alone."""
    if not await serving.canary_gone(c, ns, "iris"):
        return False
    live: dict[str, Any] = await c.get(httproute.KIND.resource(), "iris", ns)
    return httproute.live_weights(live) == {"predictor": 100}
