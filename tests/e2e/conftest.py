"""Fixtures shared by e2e modules."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import operator as operator_process
from mlops_platform.testing import webhook


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
