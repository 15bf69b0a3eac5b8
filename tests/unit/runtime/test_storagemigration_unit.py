"""Storage version migration without a cluster: its pure parts, and the rewrite's error paths that a
real API server does not produce on demand (422 on a no-op update, 403, conflicts on the CRD's status).
The paths a real server does produce (409, 404, 410, re-encoding in etcd) are integration tests."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from mlops_platform import api
from mlops_platform.cli import storage_migration
from mlops_platform.runtime import wait
from mlops_platform.runtime.control import storagemigration as sm
from mlops_platform.runtime.control import storagemigration_builtin as sm_builtin
from mlops_platform.runtime.control import storagemigration_report as sm_report
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing.fakes import FakeClient

GROUP = "example.test"
CRD_NAME = f"widgets.{GROUP}"
V2 = rclient.Resource(GROUP, "v2", "widgets", "Widget")


def _crd(storage: str = "v2", stored: list[str] | None = None, scope: str = "Namespaced") -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "resourceVersion": "1"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": v, "served": True, "storage": v == storage} for v in ("v1", "v2")],
        },
        "status": {"storedVersions": stored if stored is not None else ["v1", "v2"]},
    }


def _world(n: int, **crd: Any) -> FakeClient:
    fake = FakeClient()
    fake.objects[("customresourcedefinitions", None, CRD_NAME)] = _crd(**crd)
    for i in range(n):
        name = f"w-{i}"
        fake.objects[("widgets", "ns", name)] = {
            "apiVersion": f"{GROUP}/v2",
            "kind": "Widget",
            "metadata": {"name": name, "namespace": "ns", "uid": f"u-{i}", "resourceVersion": "5"},
            "spec": {"size": i},
        }
    return fake


def _stored(fake: FakeClient) -> list[str]:
    crd = fake.stored(resources.CRD, None, CRD_NAME)
    assert crd is not None
    return sm_report.stored_versions(crd)


# -- pure parts ----------------------------------------------------------------------------------------


def test_the_storage_version_and_whether_a_migration_is_needed() -> None:
    assert sm_report.storage_version(_crd("v2")) == "v2"
    assert sm_report.needs_migration(_crd("v2", ["v1", "v2"]))
    assert sm_report.needs_migration(_crd("v2", ["v1"]))  # odd, but v1 may be stored: migrate
    assert not sm_report.needs_migration(_crd("v2", ["v2"]))
    broken = _crd()
    broken["spec"]["versions"][0]["storage"] = True
    with pytest.raises(sm_report.MigrationError, match="2 storage versions"):
        sm_report.storage_version(broken)


def test_the_resource_is_the_storage_version_of_the_crd_with_its_scope() -> None:
    assert sm_report.resource_of(_crd("v1")) == rclient.Resource(
        GROUP, "v1", "widgets", "Widget", namespaced=True
    )
    assert not sm_report.resource_of(_crd(scope="Cluster")).namespaced


def test_the_storage_version_migration_names_the_group_resource_and_a_valid_name_prefix() -> None:
    svm = sm_builtin.migration_manifest(_crd())
    assert svm["apiVersion"] == "storagemigration.k8s.io/v1beta1" and svm["kind"] == "StorageVersionMigration"
    assert svm["spec"] == {"resource": {"group": GROUP, "resource": "widgets"}}
    assert svm["metadata"] == {"generateName": f"{CRD_NAME}-"}
    long = _crd()
    long["metadata"]["name"] = "a" * 199 + "." + "b" * 40
    prefix = sm_builtin.migration_manifest(long)["metadata"]["generateName"]
    subdomain = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    assert len(prefix) + 5 <= 253 and subdomain.match(prefix + "abcde"), prefix


@pytest.mark.parametrize(
    ("conditions", "state"),
    [
        ([], ("pending", "")),
        (
            [{"type": "Running", "status": "True", "message": "The migration is running"}],
            ("running", "The migration is running"),
        ),
        (
            [
                {"type": "Running", "status": "False", "reason": "MigrationCompleted"},
                {
                    "type": "Succeeded",
                    "status": "True",
                    "reason": "StorageVersionMigrationSucceeded",
                    "message": "",
                },
            ],
            ("succeeded", "StorageVersionMigrationSucceeded"),
        ),
        (
            [{"type": "Failed", "status": "True", "message": "resource does not exist in GC"}],
            ("failed", "resource does not exist in GC"),
        ),
    ],
)
def test_the_state_of_a_storage_version_migration(
    conditions: list[dict[str, str]], state: tuple[str, str]
) -> None:
    assert sm_builtin.migration_state({"status": {"conditions": conditions}}) == state


def test_one_line_summaries() -> None:
    done = sm_report.MigrationResult(CRD_NAME, "rewrite", "v2", ["v1", "v2"], ["v2"], 1.25, 10, 7, 1, 1, 1, 1)
    assert done.summary() == (
        f"{CRD_NAME}: storedVersions [v1, v2] -> [v2] by rewrite in 1.2s: 10 objects: 7 rewritten, "
        "1 already current, 1 conflicts, 1 gone, 1 list restarts"
    )
    done.fallback_reason = "the server does not serve storagemigration.k8s.io/v1beta1"
    assert done.summary().endswith(
        "(builtin not used: the server does not serve storagemigration.k8s.io/v1beta1)"
    )
    builtin = sm_report.MigrationResult(
        CRD_NAME, "builtin", "v2", ["v1", "v2"], ["v2"], 3.0, 4, None, None, None, None
    )
    builtin.migration = "widgets.example.test-abcde"
    assert builtin.summary().endswith(
        "by builtin in 3.0s: StorageVersionMigration widgets.example.test-abcde, 4 objects at the start"
    )
    nothing = sm_report.MigrationResult(CRD_NAME, "none", "v2", ["v2"], ["v2"], 0.01)
    assert nothing.summary() == f"{CRD_NAME}: nothing to do, storedVersions is already [v2] (0.0s)"


def test_the_cli_default_is_the_inferenceservice_crd() -> None:
    option = next(p for p in storage_migration.migrate_storage.params if p.name == "crd_name")
    assert option.default == api.CRD_NAME


async def test_bad_arguments_are_refused() -> None:
    fake = _world(1)
    with pytest.raises(ValueError, match="method"):
        await sm.migrate(fake, CRD_NAME, method="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="page_size"):
        await sm.migrate(fake, CRD_NAME, page_size=0)
    assert not fake.calls


# -- the rewrite's error paths -------------------------------------------------------------------------


async def test_nothing_to_do_reads_the_crd_only() -> None:
    fake = _world(3, stored=["v2"])
    result = await sm.migrate(fake, CRD_NAME, method="rewrite")
    assert result.method == "none" and result.stored_versions_after == ["v2"]
    assert fake.keys == [("get", "customresourcedefinitions", CRD_NAME, None)]


async def test_objects_that_cannot_be_written_fail_the_run_after_the_rest_and_nothing_is_trimmed() -> None:
    fake = _world(6)
    fake.fail("replace", "widgets", "w-2", status=422, message="spec.size: Invalid value")
    fake.fail("replace", "widgets", "w-4", status=500, message="conversion webhook failed")
    with pytest.raises(sm_report.MigrationError) as caught:
        await sm.migrate(fake, CRD_NAME, method="rewrite")
    err = caught.value
    assert len(err.failures) == 2 and "ns/w-2: 422" in err.failures[0] and "ns/w-4: 500" in err.failures[1]
    assert "2 objects of widgets.example.test could not be rewritten" in str(err)
    assert (
        err.result is not None
        and err.result.rewritten == 4
        and err.result.stored_versions_after == ["v1", "v2"]
    )
    assert not fake.status_writes and _stored(fake) == ["v1", "v2"]


async def test_a_forbidden_write_ends_the_run_at_once() -> None:
    fake = _world(20)
    fake.fail("replace", "widgets")
    with pytest.raises(rclient.ApiError) as caught:
        await sm.migrate(fake, CRD_NAME, method="rewrite", concurrency=2)
    assert caught.value.status == 403
    assert len([c for c in fake.calls if c.verb == "replace"]) <= 3
    assert not fake.status_writes and _stored(fake) == ["v1", "v2"]


async def test_a_conflict_on_the_crd_status_is_retried_on_a_fresh_read() -> None:
    fake = _world(2)
    fake.fail("replace", "customresourcedefinitions", CRD_NAME, status=409, subresource="status", times=1)
    result = await sm.migrate(fake, CRD_NAME, method="rewrite")
    assert result.stored_versions_after == ["v2"] and _stored(fake) == ["v2"]
    status_puts = [c for c in fake.calls if c.verb == "replace" and c.subresource == "status"]
    assert len(status_puts) == 2


async def test_a_storage_version_changed_during_the_run_is_not_trimmed() -> None:
    fake = _world(3)

    def switch_storage(p: sm_report.Progress) -> None:
        crd = fake.stored(resources.CRD, None, CRD_NAME)
        assert crd is not None
        for v in crd["spec"]["versions"]:
            v["storage"] = v["name"] == "v1"

    with pytest.raises(sm_report.MigrationError, match="changed from v2 to v1"):
        await sm.migrate(fake, CRD_NAME, method="rewrite", progress=switch_storage)
    assert not fake.status_writes and _stored(fake) == ["v1", "v2"]


class Gated(FakeClient):
    """PUTs wait at a gate: how many are in flight at once is visible."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.in_flight = 0
        self.most = 0

    async def replace(
        self, res: rclient.Resource, obj: dict[str, Any], *, subresource: str | None = None
    ) -> Any:
        if subresource is None:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            try:
                await self.gate.wait()
            finally:
                self.in_flight -= 1
        return await super().replace(res, obj, subresource=subresource)


async def test_at_most_concurrency_puts_are_in_flight() -> None:
    fake = Gated()
    fake.objects.update(_world(12).objects)
    run = asyncio.create_task(sm.migrate(fake, CRD_NAME, method="rewrite", concurrency=4))
    await wait.until(lambda: fake.in_flight == 4, timeout=5, what="4 PUTs in flight")
    fake.gate.set()
    result = await asyncio.wait_for(run, 5)
    assert fake.most == 4 and result.rewritten == 12 and result.stored_versions_after == ["v2"]
