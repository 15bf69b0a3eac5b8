"""Fixtures shared by e2e modules."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.devcluster import demo
from mlops_platform.devcluster.modelstore import install as modelstore
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import operator as operator_process
from mlops_platform.testing import serving, webhook


@pytest.fixture(scope="module")
async def admin_operator(kube_cluster: Path, admin_client: rclient.Client) -> AsyncIterator[rmanager.Manager]:
    """The operator in this process with admin credentials, watching every namespace (for modules
    that test behaviour, not permissions: the RBAC suites prove the operator's own rules)."""
    await webhook.install_crd(admin_client)
    async with (
        rclient.Client.from_kubeconfig(str(kube_cluster)) as c,
        operator_process.running(c) as mgr,
    ):
        yield mgr


@pytest.fixture(scope="module")
def serving_settings() -> base.BuildContext:
    """The settings of :func:`serving_operator`: the local cluster's (a module overrides them)."""
    return demo.local_settings()


@pytest.fixture(scope="module")
async def serving_operator(
    kube_cluster: Path,
    local_cluster_name: str,
    admin_client: rclient.Client,
    serving_settings: base.BuildContext,
) -> AsyncIterator[rmanager.Manager]:
    """The model store and the operator in this process with ``serving_settings``
    (``testing.serving.operator``), for the real-serving modules."""
    async with serving.operator(kube_cluster, local_cluster_name, admin_client, serving_settings) as mgr:
        yield mgr


@pytest.fixture
async def ns(namespace: str, admin_client: rclient.Client, serving_operator: rmanager.Manager) -> str:
    """For the real-serving modules: a namespace holding the store's Secret (``storage.secretName``),
    :func:`serving_operator` running."""
    await modelstore.grant(admin_client, namespace)
    return namespace
