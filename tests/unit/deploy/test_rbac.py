"""Declared RBAC: resourceNames limit a rule to named objects; merging keeps named rules apart."""

from __future__ import annotations

import pytest

from mlops_platform.deploy import rbac as deploy_rbac
from mlops_platform.runtime import rbac


def test_resource_names_render_as_resource_names() -> None:
    rule = rbac.Rule("", "secrets", ("get", "update"), "leader-election", ("tls",))
    assert deploy_rbac.policy_rule(rule) == {
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": ["tls"],
        "verbs": ["get", "update"],
    }
    assert "resourceNames" not in deploy_rbac.policy_rule(rbac.Rule("", "pods", ("list",)))


def test_create_list_and_watch_cannot_be_limited_by_name() -> None:
    for verb in ("create", "list", "watch", "deletecollection"):
        with pytest.raises(ValueError, match="cannot be limited by resourceNames"):
            rbac.requires("", "secrets", [verb], why="test", resource_names=["x"])


def test_the_webhook_rules_are_declared_and_merged_per_resource_names() -> None:
    rules = [
        r for r in deploy_rbac.declared_rules() if r.resource in ("secrets", "customresourcedefinitions")
    ]
    assert [(r.resource, r.verbs, r.scope, r.resource_names) for r in rules] == [
        ("secrets", ("create",), "leader-election", ()),
        ("secrets", ("get", "update"), "leader-election", ("mlops-platform-webhook-tls",)),
        ("customresourcedefinitions", ("get", "patch"), "cluster", ("inferenceservices.mlops.platform",)),
        ("customresourcedefinitions", ("list", "watch"), "cluster", ()),
    ]
    assert rbac.covers(rules, "update", "secrets")  # covers() ignores names (requests carry none)


def test_the_leader_election_role_holds_the_secret_rules() -> None:
    objs = deploy_rbac.objects()
    [role] = [o for o in objs if o["kind"] == "Role"]
    secrets = [r for r in role["rules"] if r["resources"] == ["secrets"]]
    assert secrets == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["mlops-platform-webhook-tls"],
            "verbs": ["get", "update"],
        },
    ]
