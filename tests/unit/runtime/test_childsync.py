"""ChildSyncer on a fake client: as few writes as possible, and never a foreign object deleted."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from mlops_platform.runtime import diff
from mlops_platform.runtime.control import childsync
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.transport import shape as rshape
from mlops_platform.testing import fakes

Obj = dict[str, Any]
HASH = "example.com/desired-hash"
CM = resources.CONFIG_MAP
OWNER: Obj = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w", "namespace": "ns", "uid": "uid-owner", "resourceVersion": "7"},
}


def syncer(client: rclient.Client) -> childsync.ChildSyncer:
    return childsync.ChildSyncer(client, field_manager="test-manager", hash_annotation=HASH)


def desired(**data: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "w-config", "namespace": "ns", "labels": {"app": "w"}},
        "data": data or {"a": "1"},
    }


def prepared(client: rclient.Client, obj: Obj) -> Obj:
    return syncer(client).prepare(obj, OWNER)


def live_of(obj: Obj, **extra: Any) -> Obj:
    """What the server returns for ``obj``: plus server fields."""
    out = copy.deepcopy(obj)
    out["metadata"] |= {"uid": "uid-cm", "resourceVersion": "42", "creationTimestamp": "2024-01-01T00:00:00Z"}
    for k, v in extra.items():
        out[k] = v
    return out


# -- owner_reference, controlled_by ------------------------------------------------------------------------


def test_owner_reference_points_at_the_owner_and_blocks_its_deletion() -> None:
    assert childsync.owner_reference(OWNER) == {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "name": "w",
        "uid": "uid-owner",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert childsync.owner_reference(OWNER, controller=False)["controller"] is False


@pytest.mark.parametrize(
    ("refs", "controlled"),
    [
        ([childsync.owner_reference(OWNER)], True),
        ([{"uid": "other", "controller": True}, childsync.owner_reference(OWNER)], True),
        ([childsync.owner_reference(OWNER, controller=False)], False),
        ([{**childsync.owner_reference(OWNER), "uid": "other"}], False),
        ([{"uid": "uid-owner"}], False),
        ([], False),
        (None, False),
    ],
    ids=[
        "controller",
        "among-others",
        "owner-not-controller",
        "other-uid",
        "no-controller-key",
        "empty",
        "none",
    ],
)
def test_controlled_by(refs: list[Obj] | None, controlled: bool) -> None:
    obj: Obj = {"metadata": {"name": "x"}}
    if refs is not None:
        obj["metadata"]["ownerReferences"] = refs
    assert childsync.controlled_by(obj, "uid-owner") is controlled
    assert childsync.controlled_by({}, "uid-owner") is False


# -- prepare -----------------------------------------------------------------------------------------------


def test_prepare_sets_the_owner_and_a_hash_of_the_desired_object() -> None:
    client = fakes.FakeClient()
    obj = desired()
    out = prepared(client, obj)
    assert out is obj  # in place
    assert out["metadata"]["ownerReferences"] == [childsync.owner_reference(OWNER)]
    h = out["metadata"]["annotations"][HASH]
    assert len(h) == 16
    assert prepared(client, desired()) == out  # deterministic
    assert prepared(client, desired(a="2"))["metadata"]["annotations"][HASH] != h
    # the hash covers the owner reference too (a new owner is a change)
    other = syncer(client).prepare(desired(), {**OWNER, "metadata": {**OWNER["metadata"], "uid": "u2"}})
    assert other["metadata"]["annotations"][HASH] != h
    assert client.calls == []


def test_prepare_keeps_other_annotations_and_replaces_owner_references() -> None:
    obj = desired()
    obj["metadata"]["annotations"] = {"keep": "me"}
    obj["metadata"]["ownerReferences"] = [{"uid": "stale"}]
    out = prepared(fakes.FakeClient(), obj)
    assert out["metadata"]["annotations"]["keep"] == "me"
    assert out["metadata"]["ownerReferences"] == [childsync.owner_reference(OWNER)]


# -- ensure ------------------------------------------------------------------------------------------------


async def test_no_request_when_live_already_carries_desired() -> None:
    client = fakes.FakeClient()
    want = prepared(client, desired(a="1", b="2"))
    live = live_of(want, status={"x": 1})
    live["metadata"]["labels"]["added-by-someone"] = "yes"  # extra fields are fine
    out = await syncer(client).ensure(CM, want, live)
    assert out == childsync.Outcome("none", live)
    assert client.calls == []


async def test_create_when_absent() -> None:
    client = fakes.FakeClient()
    want = prepared(client, desired())
    out = await syncer(client).ensure(CM, want, None)
    assert out.action == "created"
    assert out.changes == ("(absent)",)
    assert client.keys == [("apply", "configmaps", "w-config", None)]
    assert out.live is not None and out.live["metadata"]["uid"]  # what the server answered
    assert client.calls[0].body == want


async def test_the_answer_is_decoded_into_the_shape_the_cache_holds_the_kind_in() -> None:
    """An apply's answer carries ``managedFields`` (half of a Deployment's JSON): decoded into the
    cache's shape of the kind, it is never built, and what :meth:`compare` reads is all there."""

    class WithManagedFields(fakes.FakeClient):
        def _store(self, res: rclient.Resource, obj: Obj, subresource: str | None = None) -> Obj:
            stored = super()._store(res, obj, subresource)
            stored["metadata"]["managedFields"] = [{"manager": "test-manager", "fieldsV1": {"f:data": {}}}]
            return stored

    client = WithManagedFields()
    shape = rshape.shape({"data": None})
    shaped = childsync.ChildSyncer(
        client, field_manager="test-manager", hash_annotation=HASH, shape_of={CM: shape}.get
    )
    want = shaped.prepare(desired(), OWNER)
    out = await shaped.ensure(CM, want, None)
    assert out.live is not None and "managedFields" not in out.live["metadata"]
    assert not diff.differences(want, out.live)  # nothing the desired object sets is missing
    assert [c.verb for c in client.calls] == ["apply"]  # so no overwrite followed
    # without a shape the answer is whole
    whole = await syncer(client).ensure(CM, prepared(client, desired(a="2")), out.live)
    assert whole.live is not None and "managedFields" in whole.live["metadata"]


@pytest.mark.parametrize(
    ("edit", "changes"),
    [
        (lambda o: o["data"].update(a="drifted"), ["data.a"]),
        (lambda o: o["metadata"]["labels"].pop("app"), ["metadata.labels.app"]),
        (lambda o: o["metadata"].pop("ownerReferences"), ["metadata.ownerReferences"]),
        (
            lambda o: o["metadata"]["annotations"].update({HASH: "0000000000000000"}),
            [f"metadata.annotations.{HASH}"],
        ),
    ],
    ids=["value-drift", "label-removed", "owner-removed", "hash-differs"],
)
async def test_apply_when_live_differs(edit: Any, changes: list[str]) -> None:
    client = fakes.FakeClient()
    want = prepared(client, desired())
    live = live_of(want)
    edit(live)
    out = await syncer(client).ensure(CM, want, live)
    assert out.action == "updated"
    assert list(out.changes) == changes
    assert client.keys == [("apply", "configmaps", "w-config", None)]


async def test_a_dropped_field_is_seen_through_the_hash() -> None:
    client = fakes.FakeClient()
    before = prepared(client, desired(a="1", b="2"))
    live = live_of(before)
    after = prepared(client, desired(a="1"))  # we stop setting data.b
    assert diff.differences({k: v for k, v in after.items() if k != "metadata"}, live) == []
    out = await syncer(client).ensure(CM, after, live)
    assert out.action == "updated"
    assert out.changes == (f"metadata.annotations.{HASH}",)
    assert client.keys == [("apply", "configmaps", "w-config", None)]


async def test_settle_runs_after_hashing_and_sees_the_live_object() -> None:
    client = fakes.FakeClient()
    seen: list[Obj | None] = []

    def settle(want: Obj, live: Obj | None) -> None:
        seen.append(live)
        want["data"]["replicas"] = (live or {}).get("data", {}).get("replicas", "1")

    want = prepared(client, desired())
    h = want["metadata"]["annotations"][HASH]
    live = live_of(want)
    live["data"]["replicas"] = "7"  # driven by another controller
    out = await syncer(client).ensure(CM, want, live, settle)
    assert seen == [live]
    assert out.action == "none"  # the settled field matches the live one: no write
    assert client.calls == []
    assert want["metadata"]["annotations"][HASH] == h  # not re-hashed
    # absent: settle sees None, and its value is applied
    want2 = prepared(client, desired())
    out2 = await syncer(client).ensure(CM, want2, None, settle)
    assert seen[-1] is None
    assert out2.action == "created"
    assert client.calls[-1].body is not None and client.calls[-1].body["data"]["replicas"] == "1"


@pytest.mark.parametrize("code", [409, 422], ids=["conflict", "invalid"])
async def test_apply_rejected_replaces_exactly_the_differing_paths(code: int) -> None:
    client = fakes.FakeClient()
    want = prepared(client, desired(a="1"))
    want["data"] = {"a": "1"}
    want["spec"] = {"items": [{"name": "x"}]}
    live = live_of(want, status={"phase": "Ok"})
    live["data"] = {"a": "old", "theirs": "kept"}
    live["spec"] = {"items": [{"name": "x"}, {"name": "added-by-other"}], "other": 1}
    client.fail("apply", "configmaps", status=code)
    out = await syncer(client).ensure(CM, want, live)
    assert client.keys == [
        ("apply", "configmaps", "w-config", None),
        ("replace", "configmaps", "w-config", None),
    ]
    body = client.calls[1].body
    assert body is not None
    assert body["data"] == {"a": "1", "theirs": "kept"}  # a map: only the differing key
    assert body["spec"] == {"items": [{"name": "x"}], "other": 1}  # a list: replaced whole
    assert body["status"] == {"phase": "Ok"}
    assert body["metadata"]["resourceVersion"] == "42"  # optimistic concurrency on the live object
    assert out.action == "updated"
    assert set(out.changes) == {"data.a", "spec.items"}
    assert live["data"]["a"] == "old"  # the live (cached) object is not mutated


async def test_leftover_after_a_successful_apply_is_replaced() -> None:
    """Another manager's list entry survives the apply (e.g. a merged list): overwritten."""

    class Merging(fakes.FakeClient):
        async def apply(self, res: rclient.Resource, obj: Obj, **kw: Any) -> Obj:
            out = await super().apply(res, obj, **kw)
            out["spec"]["items"].append({"name": "theirs"})
            return out

    client = Merging()
    want = prepared(client, desired())
    want["spec"] = {"items": [{"name": "ours"}]}
    out = await syncer(client).ensure(CM, want, None)
    assert [c.verb for c in client.calls] == ["apply", "replace"]
    body = client.calls[1].body
    assert body is not None and body["spec"]["items"] == [{"name": "ours"}]
    assert out.action == "created"


@pytest.mark.parametrize(
    ("code", "live"),
    [(409, False), (422, False), (403, True), (400, True), (500, True)],
    ids=["409-on-create", "422-on-create", "403", "400", "500"],
)
async def test_other_apply_errors_propagate(code: int, live: bool) -> None:
    client = fakes.FakeClient()
    want = prepared(client, desired())
    current = live_of(desired(a="old")) if live else None
    client.fail("apply", "configmaps", status=code)
    with pytest.raises(rclient.ApiError) as e:
        await syncer(client).ensure(CM, want, current)
    assert e.value.status == code
    assert [c.verb for c in client.calls] == ["apply"]


async def test_a_failing_replace_propagates() -> None:
    client = fakes.FakeClient()
    want = prepared(client, desired())
    client.fail("apply", "configmaps", status=409)
    client.fail("replace", "configmaps", status=409)
    with pytest.raises(rclient.ApiError):
        await syncer(client).ensure(CM, want, live_of(desired(a="old")))
    assert [c.verb for c in client.calls] == ["apply", "replace"]


# -- remove ------------------------------------------------------------------------------------------------


def _owned(refs: list[Obj]) -> Obj:
    obj = live_of(desired())
    obj["metadata"]["ownerReferences"] = refs
    return obj


@pytest.mark.parametrize(
    ("live", "deleted"),
    [
        (_owned([childsync.owner_reference(OWNER)]), True),
        (_owned([childsync.owner_reference(OWNER, controller=False)]), False),
        (_owned([{**childsync.owner_reference(OWNER), "uid": "someone-else"}]), False),
        (_owned([]), False),
        (None, False),
    ],
    ids=["controlled", "owned-not-controlled", "controlled-by-another", "unowned", "absent"],
)
async def test_remove_deletes_only_what_the_owner_controls(live: Obj | None, deleted: bool) -> None:
    client = fakes.FakeClient()
    if live is not None:
        client.objects[("configmaps", "ns", "w-config")] = copy.deepcopy(live)
    out = await syncer(client).remove(CM, live, "uid-owner")
    assert out == childsync.Outcome("deleted" if deleted else "none", None)
    assert client.keys == ([("delete", "configmaps", "w-config", None)] if deleted else [])
    assert (("configmaps", "ns", "w-config") in client.objects) is (live is not None and not deleted)


async def test_remove_of_an_already_deleted_object_is_fine() -> None:
    client = fakes.FakeClient()  # the cache still has it; the server answers 404
    out = await syncer(client).remove(CM, _owned([childsync.owner_reference(OWNER)]), "uid-owner")
    assert out.action == "deleted"
    assert client.keys == [("delete", "configmaps", "w-config", None)]


@pytest.mark.parametrize("code", [403, 409, 500], ids=["forbidden", "conflict", "server-error"])
async def test_remove_propagates_other_errors(code: int) -> None:
    client = fakes.FakeClient()
    client.fail("delete", "configmaps", status=code)
    with pytest.raises(rclient.ApiError) as e:
        await syncer(client).remove(CM, _owned([childsync.owner_reference(OWNER)]), "uid-owner")
    assert e.value.status == code


@pytest.mark.parametrize(
    ("refs", "refused"),
    [
        (
            [{"apiVersion": "apps/v1", "kind": "Other", "name": "o", "uid": "uid-other", "controller": True}],
            True,
        ),
        ([{"apiVersion": "apps/v1", "kind": "Other", "name": "o", "uid": "uid-other"}], False),  # adoptable
        ([], False),
    ],
    ids=["controlled-by-another", "owned-not-controlled", "no-owner"],
)
async def test_an_object_controlled_by_another_owner_is_never_taken_over(
    refs: list[Obj], refused: bool
) -> None:
    client = fakes.FakeClient()
    want = prepared(client, desired(a="2"))
    live = live_of(desired(a="1"))
    live["metadata"]["ownerReferences"] = refs
    if refused:
        with pytest.raises(childsync.AlreadyOwned) as err:
            await syncer(client).ensure(CM, want, live)
        assert err.value.status == 409
        assert err.value.reason == "AlreadyOwned"
        assert "Other/o" in err.value.message
        assert client.calls == []
    else:
        out = await syncer(client).ensure(CM, want, live)
        assert out.action == "updated"
        assert [c.verb for c in client.calls] == ["apply"]
