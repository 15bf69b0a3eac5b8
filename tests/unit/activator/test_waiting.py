"""The activator's waiting room: requests held until their Service has a ready endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from mlops_platform.activator.target import Target
from mlops_platform.activator.waiting import NotReady, Room
from mlops_platform.testing import wait

IRIS = Target("ml", "iris-predictor")
OTHER = Target("ml", "other-predictor")


async def _until(check: Callable[[], bool]) -> None:
    await wait.until(check, timeout=2, interval=0.001, what="the room's count")


async def test_a_ready_service_is_answered_at_once_round_robin() -> None:
    room = Room()
    room.set_ready(IRIS, ["10.0.0.2:8080", "10.0.0.1:8080"])
    got = [await room.endpoint(IRIS, timeout=0) for _ in range(4)]
    assert got == ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.1:8080", "10.0.0.2:8080"]
    assert room.held(IRIS) == 0


async def test_requests_are_held_and_counted_until_an_endpoint_is_ready() -> None:
    room = Room()
    waiting = [asyncio.create_task(room.endpoint(IRIS, timeout=5)) for _ in range(3)]
    await _until(lambda: room.held(IRIS) == 3)
    assert room.held(OTHER) == 0
    room.set_ready(OTHER, ["10.0.0.9:8080"])  # another Service's endpoint releases none of them
    released, _ = await asyncio.wait(waiting, timeout=0.05)
    assert not released and room.held(IRIS) == 3
    room.set_ready(IRIS, ["10.0.0.1:8080"])
    assert await asyncio.gather(*waiting) == ["10.0.0.1:8080"] * 3
    assert room.held(IRIS) == 0


async def test_a_request_held_past_its_timeout_is_not_ready_and_no_longer_counted() -> None:
    room = Room()
    with pytest.raises(NotReady, match=r"ml/iris-predictor had no ready endpoint within 0.05s"):
        await room.endpoint(IRIS, timeout=0.05)
    assert room.held(IRIS) == 0
    assert not room._changed  # nothing kept for a Service nobody waits for (a Service never woken)


async def test_a_cancelled_request_is_no_longer_counted() -> None:
    room = Room()
    task = asyncio.create_task(room.endpoint(IRIS, timeout=5))
    await _until(lambda: room.held(IRIS) == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert room.held(IRIS) == 0


async def test_endpoints_that_go_away_hold_the_next_requests_again() -> None:
    room = Room()
    room.set_ready(IRIS, ["10.0.0.1:8080"])
    room.set_ready(IRIS, [])
    assert room.ready(IRIS) == ()
    task = asyncio.create_task(room.endpoint(IRIS, timeout=5))
    await _until(lambda: room.held(IRIS) == 1)
    room.set_ready(IRIS, ["10.0.0.3:8080"])
    assert await task == "10.0.0.3:8080"
