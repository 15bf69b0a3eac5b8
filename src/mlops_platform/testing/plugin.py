"""pytest plugin: a shared real cluster and per-test namespaces.

Opt-in (it is not registered as an entry point, so installing the package never adds fixtures
to other projects' test sessions): load it from a ``conftest.py`` with
``pytest_plugins = ("mlops_platform.testing.plugin",)``.

- ``kube_cluster`` (session): the kubeconfig of the cluster under test. With
  ``USE_EXISTING_CLUSTER=true`` (the envtest convention) it is ``$KUBECONFIG``; otherwise the local
  control plane named by ``$MLOPS_TEST_CLUSTER`` (default ``mlops-test``), started on demand and
  stopped at the end of the session when this session started it.
- ``admin_client`` (session): a :class:`~mlops_platform.runtime.client.Client` with admin rights;
  the InferenceService CRD is installed and a conversion webhook process serves it all session.
- ``namespace`` (function): a fresh namespace for one test, deleted afterwards.
- ``local_cluster_name`` (session): the local cluster's name, for failure-injection tests.
- ``kubectl`` (session): the pinned kubectl against the cluster under test.
- after each test on the local control plane, kube-controller-manager and kube-scheduler are started
  again if they exited (a test that stopped kube-apiserver long enough; the kubelet's part), with a
  warning naming the test: the tests after it get a whole cluster.
- ``minio_server`` / ``fake_gcs_server`` (session, started by the first test that asks; no cluster):
  a real MinIO (:class:`~mlops_platform.testing.objectstores.S3Server`) / fake-gcs-server
  (:class:`~mlops_platform.testing.objectstores.GCSServer`) on 127.0.0.1, stopped and its data
  removed at the end of the session; ``s3_bucket`` / ``gcs_bucket`` (function): a fresh bucket on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

if TYPE_CHECKING:
    from mlops_platform.devcluster import chaos
    from mlops_platform.testing import objectstores

TEST_NAMESPACE_LABEL = "mlops.platform/test"


def use_existing() -> bool:
    return os.environ.get("USE_EXISTING_CLUSTER", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[Path]:
    if use_existing():
        existing = os.environ.get("KUBECONFIG")
        if not existing:
            pytest.fail("USE_EXISTING_CLUSTER=true needs KUBECONFIG to point at the cluster")
        yield Path(existing)
        return
    from mlops_platform.devcluster import cluster

    name = os.environ.get("MLOPS_TEST_CLUSTER", "mlops-test")
    started_here = not (cluster.exists(name) and cluster.status(name)["apiserver_ready"])
    path = cluster.up(name)
    yield path
    if started_here:
        cluster.down(name)


@pytest.fixture(scope="session")
def local_cluster_name(kube_cluster: Path) -> str:
    """The local control plane's name, for tests that stop processes or compact etcd.

    Such tests cannot run against an existing cluster (``USE_EXISTING_CLUSTER=true``): skipped there.
    """
    if use_existing():
        pytest.skip("failure injection needs the local control plane, not an existing cluster")
    return os.environ.get("MLOPS_TEST_CLUSTER", "mlops-test")


@pytest.fixture(scope="session")
def _leader_elected_specs(kube_cluster: Path) -> list[chaos.StoppedComponent]:
    from mlops_platform.devcluster import chaos

    name = os.environ.get("MLOPS_TEST_CLUSTER", "mlops-test")
    return [chaos.component_spec(name, component) for component in chaos.LEADER_ELECTED]


@pytest.fixture(autouse=True)
def _leader_elected_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    if use_existing() or "kube_cluster" not in request.fixturenames:
        yield
        return
    from mlops_platform.devcluster import chaos

    specs: list[chaos.StoppedComponent] = request.getfixturevalue("_leader_elected_specs")
    yield
    name = os.environ.get("MLOPS_TEST_CLUSTER", "mlops-test")
    if started := chaos.start_exited(name, specs):
        warnings.warn(
            f"{', '.join(started)} exited during {request.node.nodeid}: started again", stacklevel=1
        )


Kubectl = Callable[..., Awaitable[tuple[int, str, str]]]


@pytest.fixture(scope="session")
def kubectl(kube_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """The pinned kubectl against the cluster under test: ``await kubectl(*args, stdin=None)``
    returns ``(returncode, stdout, stderr)``; it has its own discovery cache."""
    from mlops_platform.devcluster import binaries

    try:
        binary = str(binaries.find(build=False, names=("kubectl",))["kubectl"])
    except FileNotFoundError:
        found = shutil.which("kubectl")
        if found is None:
            pytest.fail("no kubectl: run `make binaries` or put kubectl on PATH")
        binary = found
    cache = tmp_path_factory.mktemp("kubectl-cache")

    async def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            binary,
            "--kubeconfig",
            str(kube_cluster),
            "--cache-dir",
            str(cache),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin else None), 120)
        return proc.returncode or 0, out.decode(), err.decode()

    return run


@pytest.fixture(scope="session")
async def admin_client(
    kube_cluster: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[rclient.Client]:
    """Admin credentials, on a cluster whose InferenceService CRD is installed and converted by this
    session's conversion webhook process (``testing.webhook``: the CRD needs one, like in production)."""
    from mlops_platform.testing import webhook

    c = rclient.Client.from_kubeconfig(kube_cluster)
    log = tmp_path_factory.mktemp("webhook") / "webhook.log"
    try:
        async with webhook.serving(kube_cluster, c, log_path=log):
            yield c
    finally:
        await c.close()


def _namespace_name(node_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"t-{base}-{uuid.uuid4().hex[:6]}"


@contextlib.asynccontextmanager
async def temporary_namespace(admin_client: rclient.Client, hint: str) -> AsyncIterator[str]:
    """A fresh namespace named after ``hint``, deleted on exit."""
    name = _namespace_name(hint)
    await admin_client.create(
        resources.NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: "true"}},
        },
    )
    try:
        yield name
    finally:
        try:
            await admin_client.delete(resources.NAMESPACE, name, propagation_policy="Background")
        except rclient.ApiError as e:
            if not e.not_found:
                raise


@pytest.fixture
async def namespace(admin_client: rclient.Client, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    async with temporary_namespace(admin_client, request.node.name) as name:
        yield name


@pytest.fixture(scope="session")
async def minio_server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[objectstores.S3Server]:
    from mlops_platform.testing import objectstores

    async with objectstores.minio(tmp_path_factory.mktemp("minio")) as server:
        yield server


@pytest.fixture(scope="session")
async def fake_gcs_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[objectstores.GCSServer]:
    from mlops_platform.testing import objectstores

    async with objectstores.fake_gcs(tmp_path_factory.mktemp("fake-gcs")) as server:
        yield server


def _bucket_name(node_name: str) -> str:
    """A bucket name valid on S3 and GCS (3-63 lowercase letters, digits, dashes) unique to a test."""
    base = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"t-{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
async def s3_bucket(minio_server: objectstores.S3Server, request: pytest.FixtureRequest) -> str:
    """A fresh bucket on the session's MinIO, named after the test."""
    name = _bucket_name(request.node.name)
    await minio_server.create_bucket(name)
    return name


@pytest.fixture
async def gcs_bucket(fake_gcs_server: objectstores.GCSServer, request: pytest.FixtureRequest) -> str:
    """A fresh bucket on the session's fake-gcs-server, named after the test."""
    name = _bucket_name(request.node.name)
    await fake_gcs_server.create_bucket(name)
    return name
