"""A failed request's reason becomes the ``Reconciled`` condition's only where the API takes it: an
admission webhook's Status may carry free text there, and a status with it is refused (422), so the
failure would never be reported."""

from __future__ import annotations

import msgspec
import pytest

from mlops_platform import api
from mlops_platform.api import isvc_status
from mlops_platform.controllers.inferenceservice import status
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import isvc

OBJ = api.decode(
    isvc.manifest("m", metadata={"uid": "u", "generation": 1}, modelUri="s3://m/1", framework="triton")
)


@pytest.mark.parametrize(
    ("reason", "shown"),
    [
        ("Forbidden", "Forbidden"),
        ("TooManyRequests", "TooManyRequests"),
        ("denied by policy: no GPUs here", "ApiError"),
        ("", "ApiError"),
        ("Bad-Reason", "ApiError"),
        ("x" * 1025, "ApiError"),
    ],
)
def test_the_reconciled_reason_is_one_the_api_takes(reason: str, shown: str) -> None:
    error = rclient.ApiError(403, reason, "admission webhook said no", {})
    computed = status.compute(
        OBJ, {}, [], [status.Failure("apply Deployment", error)], None, base.BuildContext()
    )
    for cond in computed["conditions"]:
        msgspec.convert(cond, isvc_status.Condition)  # raises on what the API server refuses
    reconciled = next(c for c in computed["conditions"] if c["type"] == "Reconciled")
    assert reconciled["reason"] == shown
    assert "admission webhook said no" in reconciled["message"]
