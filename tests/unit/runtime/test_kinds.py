"""Kinds resolved at run time: version preference, served versions, CRD slimming, and optional
kinds followed live (crdwatch) by the cache and by controllers — on a cache never started."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.caching import crdwatch, kinds
from mlops_platform.runtime.control import builder as rbuilder
from mlops_platform.runtime.control.reconcile import Request, Result
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.transport.client import Resource
from mlops_platform.testing import fakes
from mlops_platform.testing.queues import drain

Obj = dict[str, Any]
RULE = kinds.Kind("monitoring.coreos.com", "PrometheusRule", "prometheusrules", ("v1",), optional=True)
ROUTE = kinds.Kind("gateway.networking.k8s.io", "HTTPRoute", "httproutes", ("v1", "v1beta1"), optional=True)
PRIMARY = Resource("example.com", "v1", "widgets", "Widget")


# -- version_priority --------------------------------------------------------------------------------------


def test_version_priority_orders_like_compare_kube_aware_version_strings() -> None:
    # the example of the Kubernetes documentation (CRD versioning: version priority)
    want = ["v10", "v2", "v1", "v11beta2", "v10beta3", "v3beta1", "v12alpha1", "v11alpha2", "foo1", "foo10"]
    shuffled = [
        "foo10",
        "v1",
        "v11alpha2",
        "v3beta1",
        "v10",
        "foo1",
        "v12alpha1",
        "v2",
        "v10beta3",
        "v11beta2",
    ]
    assert sorted(shuffled, key=kinds.version_priority) == want


@pytest.mark.parametrize(
    ("higher", "lower"),
    [
        ("v2", "v1"),
        ("v1", "v1beta2"),
        ("v1beta2", "v1beta1"),
        ("v1beta1", "v1alpha1"),
        ("v1alpha1", "foo"),
        ("v2beta1", "v1beta2"),
        ("v10", "v9"),
        ("v1alpha10", "v1alpha2"),
        ("v1beta1", "v2alpha1"),
        ("a", "b"),
        ("v1alpha1", "v1beta"),  # no number after beta: not Kubernetes-like
        ("v1", "V2"),
    ],
    ids=[
        "ga-major",
        "ga-before-beta",
        "beta-minor",
        "beta-before-alpha",
        "alpha-before-other",
        "beta-major-first",
        "numeric-not-lexical",
        "alpha-minor-numeric",
        "any-beta-before-any-alpha",
        "others-alphabetical",
        "incomplete-is-other",
        "case-sensitive",
    ],
)
def test_version_priority_pairs(higher: str, lower: str) -> None:
    assert kinds.version_priority(higher) < kinds.version_priority(lower)


# -- served_version ----------------------------------------------------------------------------------------


def _crd(kind: kinds.Kind, served: list[str], unserved: tuple[str, ...] = (), **kw: Any) -> Obj:
    return fakes.crd(kind, served, unserved=unserved, **kw)


@pytest.mark.parametrize(
    ("kind", "crd", "version"),
    [
        (RULE, None, None),
        (RULE, _crd(RULE, ["v1"]), "v1"),
        (RULE, _crd(RULE, ["v1"], established=False), None),
        (RULE, _crd(RULE, ["v1"], deleting=True), None),
        (RULE, _crd(RULE, ["v2"], ("v1",)), None),
        (RULE, _crd(RULE, ["v1alpha1", "v1"]), "v1"),
        (ROUTE, _crd(ROUTE, ["v1beta1"], ("v1",)), "v1beta1"),
        (ROUTE, _crd(ROUTE, ["v1beta1", "v1"]), "v1"),
        (ROUTE, _crd(ROUTE, ["v1alpha2", "v1beta1"]), "v1beta1"),
        (
            kinds.Kind("g", "K", "ks", ("v1alpha2", "v1beta1"), optional=True),
            _crd(kinds.Kind("g", "K", "ks", ("v1alpha2", "v1beta1")), ["v1alpha2", "v1beta1"]),
            "v1beta1",
        ),
    ],
    ids=[
        "no-crd",
        "served",
        "not-established",
        "being-deleted",
        "only-versions-we-do-not-speak",
        "most-preferred-we-speak",
        "gateway-v1beta1-only",
        "gateway-v1-and-v1beta1",
        "gateway-v1alpha2-ignored",
        "server-preference-not-list-order",
    ],
)
def test_served_version(kind: kinds.Kind, crd: Obj | None, version: str | None) -> None:
    assert kinds.served_version(kind, crd) == version


def test_served_version_needs_an_established_condition() -> None:
    crd = fakes.crd(RULE)
    crd["status"]["conditions"] = [{"type": "NamesAccepted", "status": "True"}]
    assert kinds.served_version(RULE, crd) is None
    crd["status"] = {}
    assert kinds.served_version(RULE, crd) is None


def test_kind_names_and_resource() -> None:
    assert RULE.crd_name == "prometheusrules.monitoring.coreos.com"
    assert RULE.group_kind == "PrometheusRule.monitoring.coreos.com"
    assert ROUTE.resource() == Resource("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute")
    assert ROUTE.resource("v1beta1").api_version == "gateway.networking.k8s.io/v1beta1"
    dep = kinds.Kind.of(resources.DEPLOYMENT)
    assert (dep.resource(), dep.optional, dep.group_kind) == (resources.DEPLOYMENT, False, "Deployment.apps")
    with pytest.raises(ValueError, match="at least one version"):
        kinds.Kind("g", "K", "ks", ())


# -- slim_crd ----------------------------------------------------------------------------------------------


def test_slim_crd_keeps_only_what_resolution_needs() -> None:
    full = fakes.crd(ROUTE, ["v1beta1"], unserved=["v1"])
    full["metadata"] |= {
        "labels": {"gateway.networking.k8s.io/bundle-version": "v1.2.0"},
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...huge...}"},
        "managedFields": [{"manager": "kubectl"}],
        "generation": 3,
    }
    full["spec"]["conversion"] = {"strategy": "None"}
    original = copy.deepcopy(full)
    slim = kinds.slim_crd(full)
    assert full == original  # the input is not changed
    assert slim == {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": ROUTE.crd_name, "uid": f"uid-crd-{ROUTE.crd_name}", "resourceVersion": "1"},
        "spec": {
            "group": ROUTE.group,
            "names": full["spec"]["names"],
            "scope": "Namespaced",
            "versions": [
                {"name": "v1beta1", "served": True, "storage": True},
                {"name": "v1", "served": False, "storage": False},
            ],
        },
        "status": {"conditions": full["status"]["conditions"]},
    }
    assert kinds.served_version(ROUTE, slim) == kinds.served_version(ROUTE, full) == "v1beta1"


def test_slim_crd_keeps_a_deletion_timestamp() -> None:
    slim = kinds.slim_crd(fakes.crd(RULE, deleting=True))
    assert slim["metadata"]["deletionTimestamp"]
    assert kinds.served_version(RULE, slim) is None
    assert kinds.slim_crd({"metadata": {"name": "x"}})["spec"]["versions"] == []


# -- OptionalKinds on a real cache -------------------------------------------------------------------------


class Listener:
    def __init__(self) -> None:
        self.calls: list[tuple[kinds.Kind, Resource | None, Resource | None]] = []

    def __call__(self, kind: kinds.Kind, old: Resource | None, new: Resource | None) -> None:
        self.calls.append((kind, old, new))


def optional_kinds(*registered: kinds.Kind) -> tuple[rcache.Cache, crdwatch.OptionalKinds, Listener]:
    cache = rcache.Cache(fakes.FakeClient())
    ok = crdwatch.OptionalKinds(cache)
    for kind in registered:
        ok.register(kind)
    listener = Listener()
    ok.listen(listener)
    return cache, ok, listener


def test_register_watches_crds_slimmed() -> None:
    cache, ok, _ = optional_kinds()
    assert not cache.has_informer(resources.CRD)
    ok.register(kinds.Kind.of(resources.DEPLOYMENT))  # a built-in kind needs nothing
    assert not cache.has_informer(resources.CRD)
    ok.register(RULE)
    ok.register(RULE)  # idempotent
    ok.register(ROUTE)
    informer = cache.informer_for(resources.CRD)
    assert informer.transform is kinds.slim_crd
    assert informer.handlers == [ok]
    assert ok.registered == [RULE, ROUTE]
    assert cache.client.calls == []  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="registered twice"):
        ok.register(kinds.Kind(RULE.group, RULE.kind, RULE.plural, ("v1", "v1beta1"), optional=True))


def test_resolve_of_a_built_in_kind_is_static() -> None:
    _, ok, _ = optional_kinds()
    assert ok.resolve(kinds.Kind.of(resources.HPA)) == resources.HPA
    assert ok.resolve(RULE) is None


async def test_an_established_crd_resolves_and_starts_an_optional_informer() -> None:
    cache, ok, listener = optional_kinds(RULE)
    fakes.seed(cache, resources.CRD, [])
    assert cache.has_synced()
    res = RULE.resource("v1")
    ok.on_add(fakes.crd(RULE))
    assert ok.resolve(RULE) == res
    assert cache.has_informer(res)
    assert cache.informer_for(res).label_selector is None
    assert not ok.synced(RULE)  # served, not listed yet
    assert cache.has_synced()  # ...and that never makes the cache unready
    assert listener.calls == [(RULE, None, res)]
    fakes.seed(cache, res, [], optional=True)
    assert ok.synced(RULE)
    assert cache.synced(res)
    assert ok.resolve(ROUTE) is None


async def test_a_restricted_optional_kind_keeps_its_selector() -> None:
    cache, ok, _ = optional_kinds(RULE)
    cache.restrict(RULE.resource("v1"), "app.kubernetes.io/managed-by=me")
    ok.on_add(fakes.crd(RULE))
    assert cache.informer_for(RULE.resource("v1")).label_selector == "app.kubernetes.io/managed-by=me"


@pytest.mark.parametrize(
    "crd",
    [
        fakes.crd(RULE, established=False),
        fakes.crd(RULE, ["v2"], unserved=["v1"]),
        fakes.crd(RULE, deleting=True),
        fakes.crd(kinds.Kind("example.com", "Other", "others", ("v1",), optional=True)),
    ],
    ids=["not-established", "no-version-we-speak", "being-deleted", "unrelated-crd"],
)
async def test_crds_that_give_nothing_are_ignored(crd: Obj) -> None:
    cache, ok, listener = optional_kinds(RULE)
    ok.on_add(crd)
    ok.on_update(crd, crd)
    assert ok.resolve(RULE) is None
    assert listener.calls == []
    assert [i.resource.plural for i in cache.informers] == ["customresourcedefinitions"]


@pytest.mark.parametrize(
    "change",
    ["update-to-unserved", "update-to-not-established", "update-deleting", "delete"],
)
async def test_a_crd_going_away_detaches_the_informer(change: str) -> None:
    cache, ok, listener = optional_kinds(RULE)
    res = RULE.resource("v1")
    crd = fakes.crd(RULE)
    ok.on_add(crd)
    informer = cache.informer_for(res)
    if change == "delete":
        ok.on_delete(crd)
    else:
        new = {
            "update-to-unserved": fakes.crd(RULE, ["v2"], unserved=["v1"]),
            "update-to-not-established": fakes.crd(RULE, established=False),
            "update-deleting": fakes.crd(RULE, deleting=True),
        }[change]
        ok.on_update(crd, new)
    assert ok.resolve(RULE) is None
    assert not ok.synced(RULE)
    assert not cache.has_informer(res)
    assert informer not in cache.informers
    assert listener.calls == [(RULE, None, res), (RULE, res, None)]
    await ok.stop()
    # it may come back: a fresh informer
    ok.on_add(crd)
    assert cache.informer_for(res) is not informer
    assert listener.calls[-1] == (RULE, None, res)


async def test_a_crd_changing_its_served_version_moves_the_informer() -> None:
    cache, ok, listener = optional_kinds(ROUTE)
    old_res, new_res = ROUTE.resource("v1beta1"), ROUTE.resource("v1")
    before = fakes.crd(ROUTE, ["v1beta1"])
    ok.on_add(before)
    after = fakes.crd(ROUTE, ["v1beta1", "v1"])
    ok.on_update(before, after)
    ok.on_update(after, after)  # no change: no call
    assert ok.resolve(ROUTE) == new_res
    assert not cache.has_informer(old_res) and cache.has_informer(new_res)
    assert listener.calls == [(ROUTE, None, old_res), (ROUTE, old_res, new_res)]
    await ok.stop()


async def test_a_failing_listener_does_not_stop_the_others() -> None:
    _, ok, listener = optional_kinds(RULE)

    def broken(*_: Any) -> None:
        raise RuntimeError("boom")

    ok._listeners.insert(0, broken)
    ok.on_add(fakes.crd(RULE))
    assert listener.calls == [(RULE, None, RULE.resource("v1"))]


async def test_crd_events_from_the_crd_informer_reach_optional_kinds_slimmed() -> None:
    cache, ok, listener = optional_kinds(RULE)
    informer = cache.informer_for(resources.CRD)
    stored = informer._prepare(fakes.crd(RULE))  # as a LIST item is stored
    informer._replace([stored])
    assert "schema" not in informer.store.list()[0]["spec"]["versions"][0]
    assert ok.resolve(RULE) == RULE.resource("v1")
    informer._replace([])  # the CRD is gone from the next LIST: a delete
    assert ok.resolve(RULE) is None
    assert [c[2] for c in listener.calls] == [RULE.resource("v1"), None]
    await ok.stop()


# -- a controller owning an optional kind ------------------------------------------------------------------


class NoopReconciler:
    async def reconcile(self, request: Request) -> Result:
        return Result()


def widget(namespace: str, name: str) -> Obj:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
    }


async def test_owning_an_optional_kind_enqueues_every_primary_when_it_appears_and_goes() -> None:
    cache = rcache.Cache(fakes.FakeClient())
    ok = crdwatch.OptionalKinds(cache)
    fakes.seed(cache, PRIMARY, [widget("a", "w1"), widget("b", "w2")])
    ctrl = (
        rbuilder.Builder("widgets", cache, optional_kinds=ok).for_(PRIMARY).owns(RULE).build(NoopReconciler())
    )
    fakes.seed(cache, resources.CRD, [])  # registered (build) before the CRD informer's first use
    everyone = [Request("a", "w1"), Request("b", "w2")]
    try:
        assert ok.registered == [RULE]
        assert await drain(ctrl) == everyone  # the primary informer had synced: initial adds
        ok.on_add(fakes.crd(RULE))
        res = RULE.resource("v1")
        informer = cache.informer_for(res)
        assert len(informer.handlers) == 1  # the controller's, before anything is delivered
        waiting = ctrl._waiting[RULE]
        assert not waiting.done()
        assert await drain(ctrl) == []  # not before the informer has listed
        fakes.seed(cache, res, [], optional=True)
        await asyncio.wait_for(waiting, 5)  # the wait ends with the first LIST (timeout: a guard)
        assert await drain(ctrl) == everyone
        # an owned object's events map to its controller owner
        rule = {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {
                "name": "r",
                "namespace": "b",
                "ownerReferences": [
                    {
                        "apiVersion": "example.com/v1",
                        "kind": "Widget",
                        "name": "w2",
                        "uid": "u",
                        "controller": True,
                    }
                ],
            },
        }
        informer._notify_add(rule)
        assert await drain(ctrl) == [Request("b", "w2")]
        ok.on_delete(fakes.crd(RULE))
        assert await drain(ctrl) == everyone  # at once: nothing to wait for
        assert not cache.has_informer(res)
    finally:
        await ok.stop()
        await ctrl.stop(timeout=1)


async def test_the_kind_disappearing_before_its_informer_synced_still_enqueues() -> None:
    cache = rcache.Cache(fakes.FakeClient())
    ok = crdwatch.OptionalKinds(cache)
    fakes.seed(cache, PRIMARY, [widget("a", "w1")])
    ctrl = (
        rbuilder.Builder("widgets", cache, optional_kinds=ok).for_(PRIMARY).owns(RULE).build(NoopReconciler())
    )
    try:
        ok.on_add(fakes.crd(RULE))
        waiting = ctrl._waiting[RULE]  # waiting for the new informer's first LIST
        ok.on_delete(fakes.crd(RULE))
        assert await drain(ctrl) == [Request("a", "w1")]
        assert ctrl._waiting == {}  # the wait for a removed informer is cancelled, not left behind
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, 5)
    finally:
        await ok.stop()
        await ctrl.stop(timeout=1)


def test_owning_an_optional_kind_needs_optional_kinds() -> None:
    cache = rcache.Cache(fakes.FakeClient())
    with pytest.raises(rbuilder.BuildError, match=r"owns\(PrometheusRule\)"):
        rbuilder.Builder("widgets", cache).for_(PRIMARY).owns(RULE).build(NoopReconciler())


def test_owning_a_built_in_kind_watches_its_resource_at_once() -> None:
    cache = rcache.Cache(fakes.FakeClient())
    ok = crdwatch.OptionalKinds(cache)
    builder = rbuilder.Builder("widgets", cache, optional_kinds=ok).for_(PRIMARY)
    ctrl = builder.owns(kinds.Kind.of(resources.DEPLOYMENT)).build(NoopReconciler())
    assert ctrl.resources == [PRIMARY, resources.DEPLOYMENT]
    assert ok.registered == []
    assert not cache.has_informer(resources.CRD)
