"""Canary rollouts with real requests on the real node, under the replicas router (no mesh: the
predictor Service selects both components' pods, the canary's share is its share of ready
endpoints; each request lands on one at random). Version 1 of the demo iris model answers [1, 1] to
the quickstart input, version 2 (the canary) [2, 2], so every answer says who served it.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from mlops_platform import api, infer
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.devcluster import demo
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import probes, serving, wait

STABLE, CANARY = [1, 1], [2, 2]
REQUESTS = 1000


@pytest.fixture(scope="module")
def serving_settings() -> base.BuildContext:
    """The local cluster's settings, routing by replicas (``ns`` and its operator: tests/e2e/conftest)."""
    return dataclasses.replace(demo.local_settings(), router=base.Router("replicas"))


async def canary_ready(c: rclient.Client, ns: str, name: str) -> None:
    async def canary() -> bool:
        cond = probes.condition(await c.get(api.RESOURCE, name, ns), "CanaryReady")
        return cond.get("status") == "True" and cond.get("reason") == "Canary"

    await wait.until(canary, timeout=serving.READY_TIMEOUT, what="CanaryReady=True/Canary")


async def test_a_20_percent_canary_answers_its_share_and_rolls_back_under_load(
    admin_client: rclient.Client, ns: str
) -> None:
    await admin_client.create(api.RESOURCE, serving.iris("iris", replicas=4, canary="s3://models/iris/2"), ns)
    await serving.ready(admin_client, ns, "iris")
    await canary_ready(admin_client, ns, "iris")

    async def five() -> bool:  # Ready needs fewer: the share is 1 of 5 only once all 5 serve
        return await serving.ready_endpoints(admin_client, ns, "iris-predictor") == 5

    await wait.until(five, timeout=serving.READY_TIMEOUT, what="4 stable and 1 canary endpoints ready")
    gate = asyncio.Semaphore(8)  # 8 in flight: the 1,000 take seconds, not minutes

    async def one() -> list[int]:
        async with gate:
            return serving.answer(await infer.infer(admin_client, "iris", ns, serving.v2(serving.QUICKSTART)))

    answers = await asyncio.gather(*(one() for _ in range(REQUESTS)))
    canary = answers.count(CANARY)
    low, high = serving.binomial_interval(REQUESTS, 0.2)
    assert answers.count(STABLE) + canary == REQUESTS, set(map(tuple, answers))
    assert low <= canary <= high, (
        f"{canary} of {REQUESTS} answered by the canary, not within [{low:.0f}, {high:.0f}]"
    )
    print(f"the canary answered {canary} of {REQUESTS} (99.999 % interval of 20 %: [{low:.0f}, {high:.0f}])")

    async with serving.load(admin_client, ns, "iris") as traffic:
        await traffic.more(10)
        await admin_client.patch(api.RESOURCE, "iris", {"spec": {"canary": None}}, namespace=ns)
        await serving.until_canary_gone(admin_client, ns, "iris")
        after = await traffic.then(30)
    assert traffic.errors == [], traffic.summary()
    assert all(a == STABLE for a in after), "the canary answered after the rollback"


async def test_a_promotion_under_load_fails_no_request(admin_client: rclient.Client, ns: str) -> None:
    await admin_client.create(api.RESOURCE, serving.iris("iris", replicas=1, canary="s3://models/iris/2"), ns)
    await serving.ready(admin_client, ns, "iris")
    await canary_ready(admin_client, ns, "iris")
    async with serving.load(admin_client, ns, "iris") as traffic:
        await wait.until(lambda: CANARY in traffic.answers, timeout=60, what="an answer of the canary")
        await admin_client.patch(api.RESOURCE, "iris", serving.promotion("s3://models/iris/2"), namespace=ns)
        await serving.until_rolled_out(admin_client, ns, "iris", "s3://models/iris/2", serving.READY_TIMEOUT)
        await serving.until_canary_gone(admin_client, ns, "iris")
        after = await traffic.then(30)
    assert traffic.errors == [], traffic.summary()
    assert all(a == CANARY for a in after), "version 1 answered after the promotion"


async def test_a_canary_that_cannot_serve_gets_no_request(admin_client: rclient.Client, ns: str) -> None:
    """The candidate's model file is not a model: MLServer exits at start, again and again."""
    await admin_client.create(
        api.RESOURCE, serving.iris("iris", replicas=1, canary="s3://models/broken/1"), ns
    )
    await serving.ready(admin_client, ns, "iris")

    async def canary_failing() -> bool:
        cond = probes.condition(await admin_client.get(api.RESOURCE, "iris", ns), "CanaryReady")
        return cond.get("status") == "False" and cond.get("reason") != "Staging"

    async with serving.timeline(admin_client, ns, "iris") as route:
        failing = "CanaryReady=False (not Staging)"
        await wait.until(canary_failing, timeout=serving.READY_TIMEOUT, what=failing)
        async with serving.load(admin_client, ns, "iris") as traffic:
            await traffic.more(100)
    states = await serving.pod_states(admin_client, ns, "iris")
    assert traffic.errors == [], f"{traffic.summary()}; pods: {states}; route: {route}"
    print(f"route: {route}")
    assert all(a == STABLE for a in traffic.answers)
