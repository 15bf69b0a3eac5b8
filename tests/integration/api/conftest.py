"""``installed``: the InferenceService CRD installed (server-side apply, idempotent) against the
session's conversion webhook, once per module, as the API server has it."""

from __future__ import annotations

import pytest

from mlops_platform.runtime.transport.client import JSON, Client
from mlops_platform.testing import webhook


@pytest.fixture(scope="module")
async def installed(admin_client: Client) -> JSON:
    return await webhook.install_crd(admin_client)
