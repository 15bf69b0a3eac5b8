"""The bucket labeler on the real API server, with ConfigMaps standing in for the primary kind: a
replica whose primary informer is narrowed to its buckets sees the objects it owns only once they
are labelled; the labeler labels the unlabelled ones it owns (and no others), corrects a wrong
label it sees though it does not own the object, and labels a partition's objects once it owns it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mlops_platform.runtime.caching import informer as rinformer
from mlops_platform.runtime.control import labeler, partitioning
from mlops_platform.runtime.control.reconcile import Request
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import wait

P = 2


def _cm(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels or {}}}


class Owner:
    def __init__(self, ns: str) -> None:
        self.ns = ns
        self.partitions = {0}

    def __call__(self, req: Request) -> bool:
        return partitioning.partition_of(req, P) in self.partitions


@pytest.fixture
async def setup(
    admin_client: rclient.Client, namespace: str, caplog: pytest.LogCaptureFixture
) -> AsyncIterator[tuple[Any, ...]]:
    caplog.set_level(logging.DEBUG, logger=labeler.log.name)  # its debug lines are formatted too
    owner = Owner(namespace)
    primary = rinformer.Informer(
        admin_client,
        resources.CONFIG_MAP,
        namespace=namespace,
        label_selector=partitioning.partition_selector({0}, P),
    )
    lab = labeler.BucketLabeler(admin_client, resources.CONFIG_MAP, owns=owner, primary=primary)
    primary.start()
    lab.start()
    try:
        await primary.wait_for_sync(30)
        await lab.unlabelled.wait_for_sync(30)
        yield owner, primary, lab
    finally:
        await lab.stop()
        await primary.stop()


async def _labels(c: rclient.Client, ns: str) -> dict[str, str | None]:
    items = (await c.list(resources.CONFIG_MAP, ns))["items"]
    return {
        o["metadata"]["name"]: (o["metadata"].get("labels") or {}).get(partitioning.BUCKET_LABEL)
        for o in items
        if o["metadata"]["name"].startswith("o-")
    }


def _bucket(ns: str, name: str) -> str:
    return str(partitioning.bucket_of(Request(ns, name)))


async def test_owned_objects_are_labelled_and_enter_the_narrowed_cache(
    admin_client: rclient.Client, namespace: str, setup: tuple[Any, ...], caplog: pytest.LogCaptureFixture
) -> None:
    owner, primary, lab = setup
    c, ns = admin_client, namespace
    # six objects of each partition: twelve names taken in order fell all in one partition once in
    # 2,048 namespaces (the hash covers the namespace's random suffix)
    pool = [f"o-{i}" for i in range(200)]
    owned = [n for n in pool if owner(Request(ns, n))][:6]
    names = owned + [n for n in pool if not owner(Request(ns, n))][:6]
    mine = set(owned)
    assert len(mine) == 6 and len(names) == 12, names
    for n in names:
        await c.create(resources.CONFIG_MAP, _cm(n), ns)

    async def labelled() -> bool:
        got = await _labels(c, ns)
        return all(got[n] == _bucket(ns, n) for n in mine)

    await wait.until(labelled, timeout=30, what="the owned objects labelled")
    await wait.until(
        lambda: (
            {o["metadata"]["name"] for o in primary.store.list() if o["metadata"]["name"].startswith("o-")}
            == mine
        ),
        timeout=30,
        what="the narrowed cache holds exactly the owned objects",
    )
    got = await _labels(c, ns)
    assert all(got[n] is None for n in names if n not in mine), got  # not ours: left alone

    # a partition acquired later: its objects are labelled then
    owner.partitions.add(1)
    lab.enqueue_all(lambda r: partitioning.partition_of(r, P) == 1)
    await wait.until(
        lambda: _all_labelled(c, ns, names), timeout=30, what="the newly owned partition labelled"
    )
    await lab.wait_idle(lambda r: True)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


async def _all_labelled(c: rclient.Client, ns: str, names: list[str]) -> bool:
    got = await _labels(c, ns)
    return all(got[n] == _bucket(ns, n) for n in names)


async def test_a_wrong_label_seen_in_the_narrowed_cache_is_corrected(
    admin_client: rclient.Client, namespace: str, setup: tuple[Any, ...]
) -> None:
    owner, primary, _ = setup
    c, ns = admin_client, namespace
    # an object of partition 1 (not ours) labelled with a bucket of partition 0: only our narrowed
    # watch sees it, so we correct it, and it leaves our cache
    name = next(f"o-{i}" for i in range(100) if not owner(Request(ns, f"o-{i}")))
    wrong = next(str(b) for b in range(partitioning.BUCKETS) if b % P == 0)
    await c.create(resources.CONFIG_MAP, _cm(name, {partitioning.BUCKET_LABEL: wrong}), ns)
    await wait.until(
        lambda: _all_labelled(c, ns, [name]), timeout=30, what="the wrong bucket label corrected"
    )
    await wait.until(
        lambda: primary.store.get(ns, name) is None, timeout=30, what="the object left the narrowed cache"
    )
    # and a user removing the label of an object we own: labelled again
    mine = next(f"o-{i}" for i in range(100) if owner(Request(ns, f"o-{i}")))
    await c.create(resources.CONFIG_MAP, _cm(mine), ns)
    await wait.until(lambda: primary.store.get(ns, mine) is not None, timeout=30, what="labelled")
    await c.patch(
        resources.CONFIG_MAP, mine, {"metadata": {"labels": {partitioning.BUCKET_LABEL: None}}}, namespace=ns
    )
    await wait.until(lambda: _all_labelled(c, ns, [name, mine]), timeout=30, what="a removed label put back")
