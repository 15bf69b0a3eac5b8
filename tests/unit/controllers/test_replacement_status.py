"""A Deployment replacing lost replicas is not rolling out (found by the reliability suite's node
loss, ``tests/reliability/test_node_loss.py``): once PodGC deletes the pods of a deleted node, the
Deployment's counts look like a rollout (``updatedReplicas`` drops, then ``Progressing`` turns
``ReplicaSetUpdated`` until the replacements are available), and the status said
``Ready=False/RollingOut: 0 of 1 replicas updated`` although nothing was rolled out. With the
template already rolled out (the status' ``activeVersion``) and no older replica left, it now says
``NoReplicasAvailable`` (nothing serves) or ``PartiallyAvailable`` (still serving)."""

from __future__ import annotations

from typing import Any

import pytest

from mlops_platform import api
from mlops_platform.controllers.inferenceservice import children, status
from mlops_platform.controllers.inferenceservice.children import base, deployment, deployment_rollout
from mlops_platform.testing.isvc import manifest

CTX = base.BuildContext()
MODEL = "s3://models/bert/1"
Obj = dict[str, Any]


def _slot(replicas: int) -> base.Slot:
    raw = manifest(
        "bert",
        namespace="ml",
        metadata={"uid": "uid-1", "generation": 1},
        modelUri=MODEL,
        framework="torchserve",
        minReplicas=replicas,
        maxReplicas=replicas,
    )
    slot = base.slots(api.decode(raw), children.CHILDREN)[0]
    assert slot.child is deployment.CHILD
    return slot


def _live(slot: base.Slot, *, generation: int = 2, observed: int = 2, progressing: str, **counts: int) -> Obj:
    """The built Deployment as the API server shows it: its generation, status counts and conditions."""
    live = deployment.build(slot.target, CTX)
    live["metadata"]["generation"] = generation
    live["status"] = {
        "observedGeneration": observed,
        **counts,
        "conditions": [{"type": "Progressing", "status": "True", "reason": progressing}],
    }
    return live


def _ready(slot: base.Slot, live: Obj, previous: Obj) -> tuple[str, str, str]:
    isvc = slot.target.isvc
    observed = [status.Observed(slot, deployment.build(slot.target, CTX), live)]
    out = status.compute(isvc, previous, observed, [], None, CTX)
    ready = next(c for c in out["conditions"] if c["type"] == "Ready")
    return ready["status"], ready["reason"], ready["message"]


#: the two states of one replica replaced after its node was deleted: PodGC has deleted the pod and
#: the ReplicaSet not yet counted the new one; then the new one starting (not available)
LOST = {"replicas": 0, "updatedReplicas": 0, "availableReplicas": 0}
STARTING = {"replicas": 1, "updatedReplicas": 1, "readyReplicas": 0, "availableReplicas": 0}


@pytest.mark.parametrize(
    ("counts", "progressing"),
    [(LOST, "NewReplicaSetAvailable"), (STARTING, "ReplicaSetUpdated")],
    ids=["pod-deleted", "replacement-starting"],
)
def test_a_lost_replica_being_replaced_is_not_a_rollout(counts: dict[str, int], progressing: str) -> None:
    slot = _slot(1)
    live = _live(slot, progressing=progressing, **counts)
    before = deployment.condition(slot.target, CTX, None, live)
    assert before.reason == "RollingOut"  # what the Deployment's counts alone say
    ready = _ready(slot, live, {"activeVersion": MODEL})
    assert ready[:2] == ("False", "NoReplicasAvailable"), ready
    assert "0/1 replicas available, 1 starting; no rollout" in ready[2], ready


def test_one_of_two_replicas_lost_still_serves_partially() -> None:
    slot = _slot(2)
    live = _live(
        slot,
        progressing="ReplicaSetUpdated",
        replicas=2,
        updatedReplicas=2,
        readyReplicas=1,
        availableReplicas=1,
    )
    cond = deployment_rollout.replacing(
        deployment.condition(slot.target, CTX, None, live), live, active_version=MODEL
    )
    assert (cond.status, cond.reason) == ("True", "PartiallyAvailable")
    assert cond.message.startswith("1/2 replicas available, 1 starting"), cond.message
    assert _ready(slot, live, {"activeVersion": MODEL})[:2] == ("True", "Serving")


@pytest.mark.parametrize(
    ("previous", "live_changes"),
    [
        ({}, {}),  # the first rollout: nothing rolled out yet
        ({"activeVersion": "s3://models/bert/0"}, {}),  # a new model rolling out
        ({"activeVersion": MODEL}, {"status": {"replicas": 2}}),  # replicas of an older template left
        ({"activeVersion": MODEL}, {"generation": 3}),  # a template the controller has not observed
    ],
    ids=["first-rollout", "new-model", "old-replicas-left", "generation-not-observed"],
)
def test_a_rollout_is_still_a_rollout(previous: Obj, live_changes: Obj) -> None:
    slot = _slot(1)
    live = _live(slot, progressing="ReplicaSetUpdated", **STARTING)
    live["status"].update(live_changes.get("status", {}))
    if "generation" in live_changes:
        live["metadata"]["generation"] = live_changes["generation"]
    assert _ready(slot, live, previous)[:2] == ("False", "RollingOut")
