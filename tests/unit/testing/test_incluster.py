"""What the in-cluster install e2e counts as refused by RBAC, from audit entries."""

from __future__ import annotations

from typing import Any

from mlops_platform.testing import incluster


def _entry(code: int, decision: str, message: str = "") -> dict[str, Any]:
    return {
        "verb": "create",
        "objectRef": {"resource": "events", "namespace": "ns"},
        "annotations": {incluster.DECISION: decision},
        "responseStatus": {"code": code, "message": message},
    }


def test_an_rbac_refusal_and_an_unexplained_403_count_and_a_terminating_namespace_does_not() -> None:
    terminating = (
        'events "x" is forbidden: unable to create new content in namespace ns because it is being terminated'
    )
    assert incluster.forbidden([_entry(201, "allow"), _entry(403, "allow", terminating)]) == []
    (rbac,) = incluster.forbidden([_entry(403, "forbid", 'events is forbidden: User "x" cannot create')])
    assert rbac.startswith('create {"namespace": "ns", "resource": "events"}: events is forbidden')
    assert len(incluster.forbidden([_entry(403, "allow", "admission webhook denied")])) == 1
