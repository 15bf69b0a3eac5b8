"""Storage version migration against the real API server, proven by reading etcd.

Each test has its own throwaway CRD (a unique group) with two versions of identical schemas and no
conversion webhook: objects are created while v1 is the storage version, the storage version is
switched to v2 (``status.storedVersions`` becomes ``[v1, v2]``), and etcd is read directly to see at
which version each object is stored before and after :func:`storagemigration.migrate`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mlops_platform import cli
from mlops_platform.devcluster import chaos
from mlops_platform.runtime import objects
from mlops_platform.runtime.control import storagemigration as sm
from mlops_platform.runtime.control import storagemigration_builtin as sm_builtin
from mlops_platform.runtime.control import storagemigration_report as sm_report
from mlops_platform.runtime.transport import apiextensions, resources
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import crds, etcd, identity, wait

PLURAL = crds.PLURAL
FIELD_MANAGER = "mlops-platform-tests"


class Interrupted(Exception):
    pass


def _version(name: str, *, storage: bool) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}},
    }
    return {"name": name, "served": True, "storage": storage, "schema": {"openAPIV3Schema": schema}}


def _crd(group: str, storage: str) -> dict[str, Any]:
    # identical schemas: the API server converts between them by changing apiVersion only
    versions = [_version("v1", storage=storage == "v1"), _version("v2", storage=storage == "v2")]
    return crds.widget_crd(group, versions, {"strategy": "None"})


class Widgets:
    """A throwaway CRD and what the tests do with it."""

    def __init__(self, client: rclient.Client, group: str, namespace: str, cluster_name: str) -> None:
        self.client = client
        self.group = group
        self.namespace = namespace
        self.cluster_name = cluster_name
        self.probes = 0
        self.crd_name = f"{PLURAL}.{group}"
        self.v1 = rclient.Resource(group, "v1", PLURAL, "Widget")
        self.v2 = rclient.Resource(group, "v2", PLURAL, "Widget")

    async def create(self, res: rclient.Resource, names: list[str]) -> None:
        for name in names:
            obj = {
                "apiVersion": res.api_version,
                "kind": "Widget",
                "metadata": {"name": name},
                "spec": {"size": len(name)},
            }
            await self.client.create(res, obj, self.namespace)

    async def stored_at_v1(self, names: list[str]) -> list[str]:
        """``names`` created while the storage version is v1 (stored so), then the storage version
        switched to v2 (:meth:`switch_storage_to_v2`); ``names``."""
        await self.create(self.v1, names)
        await self.switch_storage_to_v2()
        return names

    async def switch_storage_to_v2(self) -> None:
        await apiextensions.install(self.client, [_crd(self.group, "v2")], field_manager=FIELD_MANAGER)
        assert await self.stored_versions() == ["v1", "v2"]
        # The API server's CRD handler follows the CRD through an informer: for a moment after the
        # update it still encodes new objects at v1. Wait until a probe object is stored at v2 (each
        # probe deleted again), so that the tests' own objects written next are.
        await wait.until(self._probe_stored_at_v2, timeout=30, what=f"{self.crd_name} stored at v2")

    async def _probe_stored_at_v2(self) -> bool:
        self.probes += 1
        name = f"storage-probe-{self.probes}"
        await self.create(self.v2, [name])
        try:
            stored = _etcd_versions(self.cluster_name, self)
        finally:
            await self.client.delete(self.v2, name, self.namespace)
        return stored.get(name) == f"{self.group}/v2"

    async def stored_versions(self) -> list[str]:
        return sm_report.stored_versions(await self.client.get(resources.CRD, self.crd_name))

    async def live(self) -> dict[str, dict[str, Any]]:
        items = (await self.client.list(self.v2, self.namespace))["items"]
        return {objects.name(o): objects.meta(o) for o in items}


@pytest.fixture
async def widgets(
    admin_client: rclient.Client, namespace: str, local_cluster_name: str
) -> AsyncIterator[Widgets]:
    group = f"m{uuid.uuid4().hex[:8]}.migration.test"
    await apiextensions.install(admin_client, [_crd(group, "v1")], field_manager=FIELD_MANAGER)
    try:
        yield Widgets(admin_client, group, namespace, local_cluster_name)
    finally:
        await apiextensions.uninstall(admin_client, [f"{PLURAL}.{group}"])


def _etcd_versions(cluster_name: str, w: Widgets) -> dict[str, str]:
    """``name -> apiVersion`` of every widget as etcd stores it."""
    return etcd.stored_api_versions(cluster_name, w.v1, w.namespace)


def _updates(c: rclient.Client) -> int:
    """Write requests this client made (PUTs and PATCHes of any resource, status included)."""
    return sum(n for (verb, _, _), n in c.requests.items() if verb in ("update", "patch", "create"))


async def _kcm_leader(c: rclient.Client) -> str:
    lease = await c.get(resources.LEASE, "kube-controller-manager", "kube-system")
    return str(lease.get("spec", {}).get("holderIdentity") or "")


async def _builtin_served(c: rclient.Client) -> bool:
    try:
        await c.resource_for(f"{sm_builtin.SVM_GROUP}/{sm_builtin.SVM_VERSION}", sm_builtin.SVM_KIND)
    except (rclient.ApiError, LookupError):
        return False
    return True


# -- rewrite -----------------------------------------------------------------------------------------


async def test_rewrite_reencodes_every_object_at_the_storage_version_then_trims_stored_versions(
    admin_client: rclient.Client, widgets: Widgets, local_cluster_name: str
) -> None:
    old = await widgets.stored_at_v1([f"old-{i:02d}" for i in range(23)])
    await widgets.create(widgets.v2, ["new-0", "new-1"])  # written after the switch: stored at v2
    stored = _etcd_versions(local_cluster_name, widgets)
    assert {n: v for n, v in stored.items() if n.startswith("old-")} == dict.fromkeys(
        old, f"{widgets.group}/v1"
    )
    assert stored["new-0"] == stored["new-1"] == f"{widgets.group}/v2"
    before = await widgets.live()
    seen: list[sm_report.Progress] = []

    result = await sm.migrate(
        admin_client, widgets.crd_name, method="rewrite", page_size=5, concurrency=3, progress=seen.append
    )

    assert result.method == "rewrite" and result.fallback_reason is None
    assert (result.seen, result.rewritten, result.unchanged, result.conflicts, result.gone) == (
        25,
        23,
        2,
        0,
        0,
    )
    assert result.stored_versions_before == ["v1", "v2"] and result.stored_versions_after == ["v2"]
    assert await widgets.stored_versions() == ["v2"]
    assert _etcd_versions(local_cluster_name, widgets) == dict.fromkeys(
        [*old, "new-0", "new-1"], f"{widgets.group}/v2"
    )
    after = await widgets.live()
    for name in old:  # re-encoded: a new resourceVersion, the same object (generation, uid)
        assert after[name]["resourceVersion"] != before[name]["resourceVersion"]
        assert (after[name]["generation"], after[name]["uid"]) == (
            before[name]["generation"],
            before[name]["uid"],
        )
    for name in ("new-0", "new-1"):  # already at v2: the PUT wrote nothing
        assert after[name]["resourceVersion"] == before[name]["resourceVersion"]
    assert seen[0].total == 25 and seen[-1].phase == "trimming"
    assert max(p.seen for p in seen) == 25

    writes = _updates(admin_client)
    again = await sm.migrate(admin_client, widgets.crd_name, method="rewrite")
    assert again.method == "none" and again.stored_versions_after == ["v2"]
    assert "nothing to do" in again.summary()
    assert _updates(admin_client) == writes, "a second run must write nothing"
    assert await widgets.live() == after


async def test_an_interrupted_rewrite_leaves_stored_versions_and_a_rerun_completes(
    admin_client: rclient.Client, widgets: Widgets, local_cluster_name: str
) -> None:
    names = await widgets.stored_at_v1([f"w-{i:02d}" for i in range(20)])

    def stop_after_five(p: sm_report.Progress) -> None:
        if p.rewritten >= 5:
            raise Interrupted

    with pytest.raises(Interrupted):
        await sm.migrate(
            admin_client,
            widgets.crd_name,
            method="rewrite",
            page_size=4,
            concurrency=2,
            progress=stop_after_five,
        )
    assert await widgets.stored_versions() == ["v1", "v2"], "an interrupted run must not trim"
    half = _etcd_versions(local_cluster_name, widgets)
    migrated = {n for n, v in half.items() if v.endswith("/v2")}
    assert 5 <= len(migrated) < len(names), half

    result = await sm.migrate(admin_client, widgets.crd_name, method="rewrite", page_size=4)
    assert (result.seen, result.rewritten, result.unchanged) == (20, 20 - len(migrated), len(migrated))
    assert await widgets.stored_versions() == ["v2"]
    assert set(_etcd_versions(local_cluster_name, widgets).values()) == {f"{widgets.group}/v2"}


async def test_a_timeout_leaves_stored_versions(admin_client: rclient.Client, widgets: Widgets) -> None:
    await widgets.stored_at_v1(["a", "b"])
    with pytest.raises(TimeoutError):
        await sm.migrate(admin_client, widgets.crd_name, method="rewrite", timeout=0)
    assert await widgets.stored_versions() == ["v1", "v2"]


class Meddling(rclient.Client):
    """The real client, but before the PUT of chosen objects another writer deletes or edits them:
    the real server then answers 404 or 409."""

    meddle: dict[str, str]

    async def replace(
        self, res: rclient.Resource, obj: dict[str, Any], *, subresource: str | None = None
    ) -> Any:
        action = self.meddle.pop(objects.name(obj), None) if res.plural == PLURAL else None
        ns = objects.namespace(obj)
        if action == "delete":
            await self.delete(res, objects.name(obj), ns)
        elif action == "write":
            await self.patch(
                res, objects.name(obj), {"metadata": {"labels": {"edited": "meanwhile"}}}, namespace=ns
            )
        return await super().replace(res, obj, subresource=subresource)


async def test_objects_deleted_or_written_during_the_run_are_fine(
    kube_cluster: Path, widgets: Widgets, local_cluster_name: str
) -> None:
    names = await widgets.stored_at_v1([f"w-{i:02d}" for i in range(10)])
    c = Meddling.from_kubeconfig(kube_cluster)
    assert isinstance(c, Meddling)
    c.meddle = {"w-01": "delete", "w-04": "write", "w-07": "delete", "w-08": "write"}
    async with c:
        result = await sm.migrate(c, widgets.crd_name, method="rewrite", page_size=3)
    assert not c.meddle, "every chosen object was meddled with"
    assert c.requests[("update", f"{PLURAL}.{widgets.group}", 404)] == 2
    assert c.requests[("update", f"{PLURAL}.{widgets.group}", 409)] == 2
    assert (result.seen, result.rewritten, result.conflicts, result.gone) == (10, 6, 2, 2)
    assert await widgets.stored_versions() == ["v2"]
    stored = _etcd_versions(local_cluster_name, widgets)
    assert stored == dict.fromkeys(sorted(set(names) - {"w-01", "w-07"}), f"{widgets.group}/v2")
    assert (await widgets.live())["w-04"].get("labels") == {"edited": "meanwhile"}


class ExpiringContinue(rclient.Client):
    """The real client, but the first continue token it sends names a compacted revision: the real
    server answers 410 Expired, as it does for a list paused for longer than etcd keeps history."""

    expired_sent = False

    async def list(self, res: rclient.Resource, namespace: str | None = None, **kw: Any) -> Any:
        token = kw.get("continue_")
        if token and not self.expired_sent and res.plural == PLURAL:
            self.expired_sent = True
            decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            decoded["rv"] = 2  # long compacted
            kw["continue_"] = base64.urlsafe_b64encode(json.dumps(decoded).encode()).decode().rstrip("=")
        return await super().list(res, namespace, **kw)


async def test_an_expired_continue_token_restarts_the_list_and_each_object_is_done_once(
    kube_cluster: Path, widgets: Widgets, local_cluster_name: str
) -> None:
    await widgets.stored_at_v1([f"w-{i:02d}" for i in range(9)])
    chaos.compact_etcd(local_cluster_name)
    c = ExpiringContinue.from_kubeconfig(kube_cluster)
    assert isinstance(c, ExpiringContinue)
    async with c:
        result = await sm.migrate(c, widgets.crd_name, method="rewrite", page_size=4)
        assert c.expired_sent and c.requests[("list", f"{PLURAL}.{widgets.group}", 410)] == 1
        updates = sum(n for (v, r, _), n in c.requests.items() if v == "update" and r.startswith(PLURAL))
    assert result.list_restarts == 1
    assert (result.seen, result.rewritten) == (9, 9)
    assert updates == 9, "the objects of the first page are not written again after the restart"
    assert await widgets.stored_versions() == ["v2"]
    assert set(_etcd_versions(local_cluster_name, widgets).values()) == {f"{widgets.group}/v2"}


async def test_the_cli_needs_only_the_documented_rights(
    admin_client: rclient.Client,
    kube_cluster: Path,
    widgets: Widgets,
    local_cluster_name: str,
    tmp_path: Path,
) -> None:
    """`migrate-storage` as a ServiceAccount bound to exactly the rewrite rules of
    docs/storage-migration.md (no StorageVersionMigration rights: auto falls back, saying why)."""
    await widgets.stored_at_v1(["a", "b", "c"])
    sa = f"migrator-{uuid.uuid4().hex[:6]}"
    crd_rule = {"apiGroups": ["apiextensions.k8s.io"], "resourceNames": [widgets.crd_name]}
    rules = [
        {**crd_rule, "resources": ["customresourcedefinitions"], "verbs": ["get"]},
        {**crd_rule, "resources": ["customresourcedefinitions/status"], "verbs": ["update"]},
        {"apiGroups": [widgets.group], "resources": [PLURAL], "verbs": ["get", "list", "update"]},
    ]
    rbac: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": sa, "namespace": widgets.namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": sa},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": sa},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": widgets.namespace}],
        },
    ]
    await identity.apply_objects(admin_client, rbac)
    try:
        token = await identity.token_for(admin_client, widgets.namespace, sa)
        kubeconfig = str(identity.token_kubeconfig(kube_cluster, token, tmp_path / "kubeconfig.yaml"))

        async def migrated_as_sa() -> Any:
            # RBAC bindings take effect within moments; until then every request is a 403
            out = await asyncio.to_thread(
                CliRunner().invoke,
                cli.main,
                ["migrate-storage", "--crd", widgets.crd_name, "--kubeconfig", kubeconfig],
            )
            return out if out.exit_code == 0 or "403" not in out.output else None

        out = await wait.until(migrated_as_sa, timeout=30, what="migrate-storage as the ServiceAccount")
        assert out.exit_code == 0, out.output
        summary = out.stdout.strip()
        assert summary.startswith(f"{widgets.crd_name}: storedVersions [v1, v2] -> [v2] by rewrite"), summary
        assert "3 rewritten" in summary and "not allowed to create storageversionmigrations" in summary
        assert await widgets.stored_versions() == ["v2"]
        assert set(_etcd_versions(local_cluster_name, widgets).values()) == {f"{widgets.group}/v2"}
    finally:
        await identity.delete_objects(admin_client, rbac)


async def test_the_cli_fails_with_a_clear_message(kube_cluster: Path) -> None:
    out = await asyncio.to_thread(
        CliRunner().invoke,
        cli.main,
        ["migrate-storage", "--crd", "nothings.nowhere.test", "--kubeconfig", str(kube_cluster)],
    )
    assert out.exit_code == 1
    assert "nothings.nowhere.test" in out.output and "404" in out.output, out.output


# -- builtin -----------------------------------------------------------------------------------------


async def test_auto_uses_the_builtin_storage_version_migration_where_served(
    admin_client: rclient.Client, widgets: Widgets, local_cluster_name: str
) -> None:
    if not await _builtin_served(admin_client):
        pytest.skip(
            f"{sm_builtin.SVM_GROUP}/{sm_builtin.SVM_VERSION} is not served "
            "(a cluster created before it was enabled?)"
        )
    names = await widgets.stored_at_v1([f"w-{i:02d}" for i in range(6)])
    before = await widgets.live()
    seen: list[sm_report.Progress] = []

    # kube-controller-manager must first discover the new CRD (its discovery resyncs every 30 s)
    result = await sm.migrate(
        admin_client, widgets.crd_name, method="auto", timeout=300, progress=seen.append
    )

    assert result.method == "builtin" and result.fallback_reason is None, result
    assert result.migration and result.seen == 6 and result.rewritten is None
    assert result.stored_versions_after == ["v2"] and await widgets.stored_versions() == ["v2"]
    assert _etcd_versions(local_cluster_name, widgets) == dict.fromkeys(names, f"{widgets.group}/v2")
    after = await widgets.live()
    assert all(after[n]["resourceVersion"] != before[n]["resourceVersion"] for n in names)
    waits = [p.message for p in seen if p.phase == "waiting"]
    assert waits and ": succeeded" in waits[-1], waits
    svm_res = await admin_client.resource_for(
        f"{sm_builtin.SVM_GROUP}/{sm_builtin.SVM_VERSION}", sm_builtin.SVM_KIND
    )
    svm = await admin_client.get(svm_res, result.migration)
    assert sm_builtin.migration_state(svm)[0] == "succeeded"
    assert svm["spec"]["resource"] == {"group": widgets.group, "resource": PLURAL}
    try:
        writes = _updates(admin_client)
        again = await sm.migrate(admin_client, widgets.crd_name, method="builtin")
        assert again.method == "none" and _updates(admin_client) == writes
    finally:
        await admin_client.delete(svm_res, result.migration)


async def test_served_but_no_controller_builtin_fails_and_auto_falls_back_to_rewrite(
    admin_client: rclient.Client, widgets: Widgets, local_cluster_name: str
) -> None:
    """kube-controller-manager stopped: the StorageVersionMigration gets no condition."""
    if not await _builtin_served(admin_client):
        pytest.skip(f"{sm_builtin.SVM_GROUP}/{sm_builtin.SVM_VERSION} is not served")
    await widgets.stored_at_v1(["a", "b"])
    svm_res = await admin_client.resource_for(
        f"{sm_builtin.SVM_GROUP}/{sm_builtin.SVM_VERSION}", sm_builtin.SVM_KIND
    )
    leader = await _kcm_leader(admin_client)
    stopped = chaos.stop_component(local_cluster_name, "kube-controller-manager")
    try:
        with pytest.raises(sm_report.MigrationError, match="no controller acted on StorageVersionMigration"):
            await sm.migrate(
                admin_client, widgets.crd_name, method="builtin", builtin_start_timeout=3, poll_interval=0.5
            )
        assert await widgets.stored_versions() == ["v1", "v2"]
        result = await sm.migrate(
            admin_client, widgets.crd_name, method="auto", builtin_start_timeout=3, poll_interval=0.5
        )
    finally:
        chaos.start_component(local_cluster_name, stopped)

        async def new_leader() -> bool:
            return await _kcm_leader(admin_client) not in ("", leader)

        # the tests after this one need the controllers: wait until the new process leads
        await wait.until(new_leader, timeout=90, what="a new kube-controller-manager holds its Lease")
    assert result.method == "rewrite" and result.rewritten == 2
    assert result.fallback_reason and "no controller acted" in result.fallback_reason
    assert "builtin not used" in result.summary()
    assert await widgets.stored_versions() == ["v2"]
    assert set(_etcd_versions(local_cluster_name, widgets).values()) == {f"{widgets.group}/v2"}
    # the StorageVersionMigrations nobody acted on were deleted
    left = (await admin_client.list(svm_res))["items"]
    assert not [s for s in left if s["spec"]["resource"]["group"] == widgets.group]
