"""The reliability scenarios' shared start and report (testing.scenario) and the background task of
a block (testing.background), without a cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mlops_platform.testing import background, fakes, reliability
from mlops_platform.testing.scenario import Scenario, expected, model_uri, one_replica


def _scenario(rows: list[reliability.Row]) -> Scenario:
    return Scenario(fakes.FakeClient(), "ns", Path("kubeconfig"), Path("logs"), rows.append)


def test_a_row_counts_the_last_audit_and_takes_its_time_unless_given_the_slowest() -> None:
    rows: list[reliability.Row] = []
    converged = reliability.Converged(reliability.Audit(checked=4, children=12), 2.5)
    _scenario(rows).report("1. a", 3, "3 faults", converged, "notes")
    _scenario(rows).report("2. b", 1, "1 fault", converged, "notes", max_converge_s=7.0)
    _scenario(rows).report("3. c", 1, "none", 9, "notes")
    assert [(r.scenario, r.repetitions, r.checked, r.max_converge_s) for r in rows] == [
        ("1. a", 3, 16, 2.5),
        ("2. b", 1, 16, 7.0),
        ("3. c", 1, 9, None),
    ]


def test_the_seed_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(reliability.SEED_ENV, "1234")
    seed, rng = _scenario([]).seeded("x", "2 objects")
    again, rng_again = _scenario([]).seeded("x", "2 objects")
    assert seed == again == 1234
    assert [rng.random() for _ in range(3)] == [rng_again.random() for _ in range(3)]


def test_the_manifests_and_expectations_agree() -> None:
    obj = one_replica("a", modelUri=model_uri("a", 3))
    assert obj["spec"]["modelUri"] == "s3://models/a/3"
    assert (obj["spec"]["minReplicas"], obj["spec"]["maxReplicas"]) == (1, 1)
    assert expected({"a": model_uri("a", 3)}) == {"a": reliability.Expected(model_uri="s3://models/a/3")}


async def test_a_background_task_ends_with_its_block() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    async with background.task(forever()) as task:
        await started.wait()
        assert not task.done()
    assert task.cancelled()


async def test_a_background_task_that_failed_fails_the_block() -> None:
    async def broken() -> None:
        raise RuntimeError("the watch broke")

    with pytest.raises(RuntimeError, match="the watch broke"):
        async with background.task(broken()) as task:
            await asyncio.wait([task])
