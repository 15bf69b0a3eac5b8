"""The informer converges to the server's truth through API server restarts, compaction and gaps."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mlops_platform.devcluster import chaos
from mlops_platform.runtime.caching import informer as rinformer
from mlops_platform.runtime.transport import apiextensions, resources
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import controlplane, crds, requests, wait


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def on_add(self, obj: dict[str, Any]) -> None:
        self.events.append(("add", obj["metadata"]["name"]))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.events.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: dict[str, Any]) -> None:
        self.events.append(("delete", obj["metadata"]["name"]))


def _cm(name: str, value: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}}


async def _server_truth(c: rclient.Client, ns: str) -> dict[str, str]:
    items = (await c.list(resources.CONFIG_MAP, ns))["items"]
    return {i["metadata"]["name"]: i["metadata"]["resourceVersion"] for i in items}


def _cache_view(informer: rinformer.Informer) -> dict[str, str]:
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in informer.store.list()}


async def _converged(c: rclient.Client, ns: str, informer: rinformer.Informer) -> None:
    async def same() -> bool:
        return _cache_view(informer) == await _server_truth(c, ns)

    await wait.until(same, timeout=90, what="informer cache == server")


@pytest.fixture
async def informer(kube_cluster: Path, namespace: str) -> AsyncIterator[rinformer.Informer]:
    # its own client: the API server restarts must break ITS connections
    c = rclient.Client.from_kubeconfig(kube_cluster)
    i = rinformer.Informer(c, resources.CONFIG_MAP, namespace=namespace, page_size=2, min_watch_timeout=30)
    i.start()
    await i.wait_for_sync(timeout=30)
    yield i
    await i.stop()
    await c.close()


async def test_paged_list_then_watch_delivers_every_change(
    admin_client: rclient.Client, namespace: str, informer: rinformer.Informer
) -> None:
    rec = Recorder()
    informer.add_event_handler(rec)
    for n in range(5):
        await admin_client.create(resources.CONFIG_MAP, _cm(f"cm-{n}"), namespace)
    await admin_client.patch(resources.CONFIG_MAP, "cm-1", {"data": {"v": "2"}}, namespace=namespace)
    await admin_client.delete(resources.CONFIG_MAP, "cm-2", namespace)
    await _converged(admin_client, namespace, informer)
    assert ("update", "cm-1") in rec.events
    assert ("delete", "cm-2") in rec.events
    assert all("managedFields" not in o["metadata"] for o in informer.store.list())
    # a page size of 2 forced several LIST pages at start; a second informer sees all 4 via pages
    c2 = rinformer.Informer(admin_client, resources.CONFIG_MAP, namespace=namespace, page_size=2)
    c2.start()
    await c2.wait_for_sync(timeout=30)
    assert sorted(_cache_view(c2)) == sorted(_cache_view(informer))
    await c2.stop()


async def test_converges_after_apiserver_restart_with_changes_while_the_watch_is_down(
    admin_client: rclient.Client, namespace: str, informer: rinformer.Informer, local_cluster_name: str
) -> None:
    for n in range(3):
        await admin_client.create(resources.CONFIG_MAP, _cm(f"before-{n}"), namespace)
    await _converged(admin_client, namespace, informer)

    await controlplane.apiserver_restarted(admin_client, local_cluster_name)
    # changes while the informer's watch is down (it is still backing off)
    await admin_client.delete(resources.CONFIG_MAP, "before-0", namespace)
    await admin_client.patch(resources.CONFIG_MAP, "before-1", {"data": {"v": "9"}}, namespace=namespace)
    await admin_client.create(resources.CONFIG_MAP, _cm("after-0"), namespace)
    await _converged(admin_client, namespace, informer)
    assert informer.store.get(namespace, "before-1")["data"] == {"v": "9"}  # type: ignore[index]


async def test_relists_after_etcd_compaction_makes_the_watch_expire(
    admin_client: rclient.Client, namespace: str, informer: rinformer.Informer, local_cluster_name: str
) -> None:
    await admin_client.create(resources.CONFIG_MAP, _cm("a"), namespace)
    await _converged(admin_client, namespace, informer)
    relists = informer.relists
    endpoint = chaos.etcd_endpoint(local_cluster_name)

    # a write this informer does not watch moves etcd's revision past the informer's resourceVersion
    await admin_client.create(
        resources.SECRET, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bump"}}, namespace
    )
    watched_from = int(informer.last_resource_version or 0)
    compacted: list[int] = []
    await controlplane.apiserver_restarted(
        admin_client,
        local_cluster_name,
        while_down=lambda: compacted.append(chaos.compact_etcd(local_cluster_name, endpoint)),
    )
    assert compacted[0] > watched_from
    await admin_client.create(resources.CONFIG_MAP, _cm("b"), namespace)
    await admin_client.delete(resources.CONFIG_MAP, "a", namespace)
    await _converged(admin_client, namespace, informer)
    assert informer.relists > relists, "the expired watch must have forced a re-list"


async def test_resync_redelivers_cached_objects_without_requests(
    admin_client: rclient.Client, namespace: str, informer: rinformer.Informer
) -> None:
    await admin_client.create(resources.CONFIG_MAP, _cm("x"), namespace)
    await _converged(admin_client, namespace, informer)
    rec = Recorder()
    informer.add_event_handler(rec)
    before = sum(informer.client.requests.values())
    informer.resync()
    assert [e for e in rec.events if e[1] == "x"] == [("add", "x"), ("update", "x")]
    assert sum(informer.client.requests.values()) == before


def _labelled(name: str, bucket: str) -> dict[str, Any]:
    cm = _cm(name)
    cm["metadata"]["labels"] = {"bucket": bucket, "owned": "yes"}
    return cm


def _secret(name: str, bucket: str) -> dict[str, Any]:
    secret = _labelled(name, bucket)
    secret["kind"], secret["stringData"] = "Secret", secret.pop("data")
    return secret


@contextlib.asynccontextmanager
async def _bucketed(
    c: rclient.Client, namespace: str, buckets: dict[str, str], selector: str
) -> AsyncIterator[tuple[rinformer.Informer, Recorder]]:
    """ConfigMaps ``name -> bucket`` (label ``bucket``), and a synced informer of ``selector`` with a
    recorder of its events; stopped on exit."""
    for name, bucket in buckets.items():
        await c.create(resources.CONFIG_MAP, _labelled(name, bucket), namespace)
    inf = rinformer.Informer(c, resources.CONFIG_MAP, namespace=namespace, label_selector=selector)
    rec = Recorder()
    inf.add_event_handler(rec)
    inf.start()
    try:
        await inf.wait_for_sync(timeout=30)
        yield inf, rec
    finally:
        await inf.stop()


ABC = {"a-1": "a", "a-2": "a", "b-1": "b", "c-1": "c"}


async def test_reselect_relists_with_the_new_selector_and_delivers_the_difference(
    admin_client: rclient.Client, namespace: str
) -> None:
    async with _bucketed(admin_client, namespace, ABC, "bucket in (a)") as (inf, rec):
        assert sorted(_cache_view(inf)) == ["a-1", "a-2"]
        lists = inf.relists
        rec.events.clear()
        await inf.reselect("bucket in (a,b)")  # returns once the new LIST is stored
        assert sorted(_cache_view(inf)) == ["a-1", "a-2", "b-1"]
        assert rec.events == [("add", "b-1")]  # the objects selected before get no event
        assert inf.relists == lists + 1
        await inf.reselect("bucket in (a,b)")  # the same selector: nothing to do
        assert inf.relists == lists + 1
        rec.events.clear()
        await inf.reselect("bucket in (b)")
        assert sorted(_cache_view(inf)) == ["b-1"]
        assert sorted(rec.events) == [("delete", "a-1"), ("delete", "a-2")]
        # and it watches with the new selector: a change in b is seen, one in a is not
        await admin_client.patch(resources.CONFIG_MAP, "a-1", {"data": {"v": "2"}}, namespace=namespace)
        await admin_client.patch(resources.CONFIG_MAP, "b-1", {"data": {"v": "2"}}, namespace=namespace)
        await wait.until(lambda: ("update", "b-1") in rec.events, timeout=30, what="b-1 update seen")
        assert ("update", "a-1") not in rec.events and "a-1" not in _cache_view(inf)


async def test_widen_lists_only_the_added_selection_and_resumes_the_watch_missing_nothing(
    admin_client: rclient.Client, namespace: str
) -> None:
    async with _bucketed(admin_client, namespace, ABC, "bucket in (a)") as (inf, rec):
        lists = inf.relists
        watched = inf.last_resource_version
        # changes the stopped watch has not delivered yet: the resumed watch replays them
        await admin_client.patch(resources.CONFIG_MAP, "a-1", {"data": {"v": "2"}}, namespace=namespace)
        rec.events.clear()
        with requests.recording(admin_client) as recorder:
            await inf.widen("bucket in (a,b)", "bucket in (b)")
        assert {"b-1"} <= set(_cache_view(inf)) <= {"a-1", "a-2", "b-1"}
        assert ("add", "b-1") in rec.events and ("add", "a-1") not in rec.events
        assert inf.relists == lists, "widening must not re-list what was selected"
        # one LIST (the added selection); the watch resumed where it was, not at a new LIST's version
        assert [r.verb for r in recorder.records if r.verb == "list"] == ["list"]
        assert inf.label_selector == "bucket in (a,b)" and watched is not None
        await admin_client.patch(resources.CONFIG_MAP, "b-1", {"data": {"v": "2"}}, namespace=namespace)
        await admin_client.create(resources.CONFIG_MAP, _labelled("b-2", "b"), namespace)
        await admin_client.patch(resources.CONFIG_MAP, "c-1", {"data": {"v": "2"}}, namespace=namespace)
        await wait.until(
            lambda: (
                (inf.store.get(namespace, "a-1") or {}).get("data") == {"v": "2"}
                and (inf.store.get(namespace, "b-1") or {}).get("data") == {"v": "2"}
                and inf.store.get(namespace, "b-2") is not None
            ),
            timeout=30,
            what="the change made before widening and those after it seen",
        )
        assert "c-1" not in _cache_view(inf)
        assert inf.relists == lists


async def test_widen_at_a_version_the_server_cannot_list_falls_back_to_a_full_relist(
    admin_client: rclient.Client, namespace: str
) -> None:
    async with _bucketed(admin_client, namespace, {"a-1": "a", "b-1": "b"}, "bucket in (a)") as (inf, _):
        lists = inf.relists
        inf.last_resource_version = "not-a-version"  # an Exact LIST of it is refused (400)
        await inf.widen("bucket in (a,b)", "bucket in (b)")
        assert sorted(_cache_view(inf)) == ["a-1", "b-1"]
        assert inf.relists == lists + 1


async def test_the_cache_scope_narrows_scoped_resources_only(
    admin_client: rclient.Client, namespace: str
) -> None:
    from mlops_platform.runtime.caching import cache as rcache

    for name, bucket in (("a-1", "a"), ("b-1", "b")):
        await admin_client.create(resources.CONFIG_MAP, _labelled(name, bucket), namespace)
    await admin_client.create(resources.SECRET, _secret("s-a", "a"), namespace)
    await admin_client.create(resources.SECRET, _secret("s-b", "b"), namespace)
    cache = rcache.Cache(admin_client, namespace=namespace)
    cache.restrict(resources.CONFIG_MAP, "owned=yes", scoped=True)
    cache.restrict(resources.SECRET, "owned=yes")  # not scoped
    await cache.set_scope("bucket in (a)")  # before start: the first LISTs use it
    configmaps = cache.informer_for(resources.CONFIG_MAP)
    secrets = cache.informer_for(resources.SECRET)
    assert configmaps.label_selector == "owned=yes,bucket in (a)"
    cache.start()
    try:
        await cache.wait_for_sync(30)
        assert sorted(_cache_view(configmaps)) == ["a-1"]
        assert sorted(_cache_view(secrets)) == ["s-a", "s-b"]
        await cache.set_scope("bucket in (b)")
        assert sorted(_cache_view(configmaps)) == ["b-1"]
        assert sorted(_cache_view(secrets)) == ["s-a", "s-b"]
        await cache.set_scope(None)
        assert sorted(_cache_view(configmaps)) == ["a-1", "b-1"]
        assert configmaps.label_selector == "owned=yes"
    finally:
        await cache.stop()


async def test_a_kind_served_late_is_listed_within_a_second_or_two_not_after_a_grown_backoff(
    kube_cluster: Path, admin_client: rclient.Client, namespace: str
) -> None:
    """An informer for a kind whose CRD does not exist yet gets 404s; once the CRD is established it
    syncs within ~NOT_FOUND_RETRY. After 6 failures an exponential backoff would wait 25 s or more.
    Its error listener hears of the 404 once, not at every retry, and once of its end."""
    group = f"late-{namespace[-6:]}.example.com"
    version = {
        "name": "v1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object"}},
    }
    crd = crds.widget_crd(group, [version], {"strategy": "None"})
    res = rclient.Resource(group, "v1", crds.PLURAL, "Widget")
    async with rclient.Client.from_kubeconfig(kube_cluster) as c:
        i = rinformer.Informer(c, res, namespace=namespace)
        heard: list[tuple[int | None, int | None]] = []
        i.add_error_listener(lambda old, new: heard.append((_status(old), _status(new))))
        i.start()
        try:
            await wait.until(lambda: i.failures >= 6, timeout=30, what="6 failed LISTs of an unserved kind")
            assert isinstance(i.last_error, rclient.ApiError) and i.last_error.not_found
            assert heard == [(None, 404)]
            await apiextensions.install(admin_client, [crd], field_manager="test")
            loop = asyncio.get_running_loop()
            established = loop.time()
            await i.wait_for_sync(timeout=30)
            took = loop.time() - established
            print(f"\nsynced {took:.2f}s after the CRD was established ({i.failures} failed attempts)")
            assert took < 3 * rinformer.NOT_FOUND_RETRY, took
            assert heard == [(None, 404), (404, None)]
        finally:
            await i.stop()
            await apiextensions.uninstall(admin_client, [crd["metadata"]["name"]])


def _status(error: Exception | None) -> int | None:
    return error.status if isinstance(error, rclient.ApiError) else None
