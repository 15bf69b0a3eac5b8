"""Scenario 7, node loss: a kwok node holding predictor pods is deleted; the pods are rescheduled onto
the other nodes, the InferenceServices that lost pods say so on their status while they are
rescheduled (``Ready=False`` with a reason when no replica is left, ``DeploymentAvailable`` degraded
when some are), and they are back to ``Ready=True`` afterwards.

What happens when a Node object is deleted (measured on the local cluster, kube-controller-manager
of Kubernetes 1.36): nothing, at first. kwok stops playing the node's kubelet, but its pods keep the
status they had (Running, Ready), the Deployment keeps counting them available, and so the
InferenceService stays ``Ready=True`` (what the workload API says). The pod garbage collector
(PodGC, ``pkg/controller/podgc``) runs every 20 s; it puts the node of an orphaned pod in a 40 s
quarantine (its informer could lag), then GETs the node and, if it is gone, marks each of its pods
Failed with ``DisruptionTarget=True/DeletionByPodGC`` and force-deletes it: 40-60 s after the
deletion, 80 s at most. Both periods are constants of the controller (no flag), so the test waits
for the real PodGC: it deletes nothing but the Node. The ReplicaSets then create replacement pods,
the scheduler places them on the remaining nodes and kwok makes them Ready.

Isolation: every repetition creates a node of its own (a kwok node like the cluster's CPU nodes,
named ``rel-node-loss-<id>-<n>``), larger than the others, so the scheduler's least-allocated
scoring puts the new predictor pods on it (the API offers no node selector): one-replica
InferenceServices land there whole, a two-replica one spreads (the default topology spread), losing
one replica of two. The cluster's own nodes are never touched; the test's nodes are gone at the end.
The first repetition creates the InferenceServices after its node; the next ones roll out a new
``modelUri`` after theirs (new pods, placed on the new node). The test's pods take
:data:`MODEL_LOAD_MS` to become Ready (a kwok Stage of its namespace: a model server loads its model
before its readiness probe passes), as a replacement does in a real cluster; with kwok's instant
readiness the outage the API shows would last milliseconds, shorter than any reconcile.

Per repetition: every InferenceService converged and its rollout finished (every replica available),
at least one with all its pods on the node, the node deleted, PodGC's deletion of its pods within
``POD_GC_WITHIN``, the namespace converged (:func:`reliability.converge`, every pod on a node that
exists, every status showing all replicas available) within ``RECOVER_WITHIN`` of it, and from a
watch of the statuses (started before the faults): each InferenceService that lost all its pods went
``Ready=False`` with a reason and a message and then ``Ready=True``; one that lost some showed a
degraded ``DeploymentAvailable`` (``PartiallyAvailable``, or ``Ready=False``) and recovered; one
that lost none never went ``Ready=False``; none of them called it ``RollingOut`` (nothing was rolled
out: the Deployment's counts look like a rollout while replicas are replaced, which the status once
repeated; ``tests/unit/controllers/test_replacement_status.py``); no status went back to an older
generation. Run with ``-s`` for the figures and each transition.

Not asserted, because the operator cannot see it: during PodGC's quarantine the pods of the deleted
node still say Running and Ready, so the InferenceService says ``Ready=True`` for those 40-60 s
(seeing it would take a watch of Nodes, which the operator's RBAC does not include).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from mlops_platform import api
from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import deployment
from mlops_platform.devcluster import nodes
from mlops_platform.runtime import objects
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import background, isvc, operator, reliability, stages, wait
from mlops_platform.testing.scenario import Scenario, expected, model_uri

ISVC = isvc.RESOURCE  # v1alpha1 objects: every write goes through the conversion webhook
REPETITIONS = reliability.repetitions(3, 1)
#: InferenceServices with one replica (lost whole with the node) and with two (one of them lost)
SINGLE = reliability.scale(6, 3)
DOUBLE = reliability.scale(2, 1)
#: the test's node: the cluster's CPU node with more room, so that new pods are scored onto it
NODE_CAPACITY = {"cpu": "256", "memory": "2Ti"}
#: acceptance bounds (the waits' own timeouts are longer): PodGC deletes the pods of a deleted node
#: 40-60 s after the deletion (20 s period + 40 s quarantine; 80 s if a period is missed), and the
#: replacements are Ready within seconds on kwok
POD_GC_WITHIN = 85.0
RECOVER_WITHIN = 30.0
TIMEOUT = 150.0
#: how long a predictor pod of the test takes to become Ready once started: a model server loads
#: its model before its readiness probe passes (kwok's default stage makes pods Ready at once,
#: which no real replacement is; with it the outage the API shows between PodGC and the
#: replacement would last a few milliseconds)
MODEL_LOAD_MS = 3000
READY = "Ready"
AVAILABLE = deployment.CONDITION  # the predictor Deployment's condition on the status
PARTIAL, ROLLING_OUT, READY_TRUE = "PartiallyAvailable", "RollingOut", "True"


@dataclasses.dataclass(frozen=True)
class Seen:
    """One status the watch showed."""

    at: float  # time.monotonic() when the event arrived
    name: str
    ready: tuple[str, str, str]  # Ready: status, reason, message
    available: tuple[str, str]  # DeploymentAvailable: status, reason


@dataclasses.dataclass
class Statuses:
    """Every status of the namespace's InferenceServices, in watch order, and the generations seen
    (for :meth:`reliability.StatusHistory.regressions`)."""

    seen: list[Seen] = dataclasses.field(default_factory=list)
    history: reliability.StatusHistory = dataclasses.field(default_factory=reliability.StatusHistory)

    def since(self, name: str, start: float) -> list[Seen]:
        return [s for s in self.seen if s.name == name and s.at >= start]


def _condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), {})


@contextlib.asynccontextmanager
async def _watching(c: rclient.Client, ns: str) -> AsyncIterator[Statuses]:
    """:class:`Statuses` from a watch of the storage version (no conversion per event) started before
    the block, re-started from the last resourceVersion when the API server ends it."""
    out = Statuses()
    rv = (await c.list(api.RESOURCE, ns))["metadata"]["resourceVersion"]

    def note(obj: Mapping[str, Any]) -> None:
        name, st = obj["metadata"]["name"], obj.get("status") or {}
        if st.get("observedGeneration") is not None:
            out.history.observed[name].append(int(st["observedGeneration"]))
            out.history.events += 1
        ready, available = _condition(obj, READY), _condition(obj, AVAILABLE)
        out.seen.append(
            Seen(
                time.monotonic(),
                name,
                (ready.get("status", ""), ready.get("reason", ""), ready.get("message", "")),
                (available.get("status", ""), available.get("reason", "")),
            )
        )

    async def run() -> None:
        nonlocal rv
        while True:
            try:
                async for event in c.watch(api.RESOURCE, ns, resource_version=rv, timeout_seconds=300):
                    obj = event["object"]
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        note(obj)
            except Exception:  # a watch ended by an error: again from rv
                await asyncio.sleep(0.5)  # a back-off before the next try, not a synchronisation

    async with background.task(run()):
        yield out


def _loading_stage(name: str, namespace: str) -> dict[str, Any]:
    """kwok's default pod-ready Stage for the pods of ``namespace`` only, delayed by
    :data:`MODEL_LOAD_MS` (its weight beats the default stage's)."""
    stage = copy.deepcopy(next(s for s in nodes.default_stages() if s["metadata"]["name"] == "pod-ready"))
    stage["metadata"] = {"name": name}
    stage["spec"]["selector"]["matchExpressions"].append(
        {"key": ".metadata.namespace", "operator": "In", "values": [namespace]}
    )
    stage["spec"]["delay"] = {"durationMilliseconds": MODEL_LOAD_MS}
    stage["spec"]["weight"] = 10000
    return stage


def _node(name: str) -> dict[str, Any]:
    """A kwok node like the cluster's CPU nodes, named ``name``, with :data:`NODE_CAPACITY`."""
    node = copy.deepcopy(nodes.fake_nodes(1)[0])
    meta = node["metadata"]
    meta["name"] = name
    meta["labels"]["kubernetes.io/hostname"] = name
    meta["annotations"][nodes.RESOURCE_METRICS_PATH_ANNOTATION] = f"/metrics/nodes/{name}/metrics/resource"
    capacity = {**node["status"]["capacity"], **NODE_CAPACITY}
    node["status"]["capacity"] = node["status"]["allocatable"] = capacity
    return node


async def _pods(c: rclient.Client, ns: str) -> list[dict[str, Any]]:
    """The namespace's predictor pods that are not being deleted."""
    listed = (await c.list(resources.POD, ns, label_selector=labels.INFERENCESERVICE))["items"]
    return [p for p in listed if not p["metadata"].get("deletionTimestamp")]


def _placement(pods: list[dict[str, Any]], node: str) -> dict[str, tuple[int, int]]:
    """InferenceService name -> (its pods on ``node``, its pods elsewhere)."""
    out: dict[str, tuple[int, int]] = {}
    for pod in pods:
        name = objects.labels(pod)[labels.INFERENCESERVICE]
        on, off = out.get(name, (0, 0))
        out[name] = (on + 1, off) if pod["spec"].get("nodeName") == node else (on, off + 1)
    return out


@dataclasses.dataclass
class Loss:
    """One repetition's figures."""

    node: str
    lost: list[str]  # InferenceServices with all their pods on the node
    degraded: list[str]  # ... with some
    untouched: list[str]
    pods_lost: int
    gc_s: float  # node deleted -> none of its pods left (PodGC)
    recover_s: float  # PodGC -> the namespace converged, every status Ready with all replicas available
    false_s: list[float]  # per lost InferenceService: how long Ready was False
    reasons: list[str]  # the Ready reasons shown while False (and the degraded reasons)


async def _all_available(statuses: Statuses, names: Iterable[str]) -> None:
    """Wait until the last status the watch showed of each of ``names`` is Ready with every replica
    available: no rollout left (:func:`reliability.converge` asks Ready, which a rollout keeps while
    its old replica serves) and the watch caught up with the status writes (it may trail the GETs)."""

    def settled() -> bool:
        last = {s.name: s for s in statuses.seen}
        whole = (READY_TRUE, "ReplicasAvailable")
        return all(n in last and (last[n].ready[0], last[n].available[1]) == whole for n in names)

    await wait.until(settled, timeout=TIMEOUT, what="every status Ready with all replicas available")


async def _lose_node(
    c: rclient.Client,
    ns: str,
    node: str,
    expected: Mapping[str, reliability.Expected],
    statuses: Statuses,
) -> Loss:
    """Delete ``node`` (holding predictor pods of a converged namespace), wait for PodGC and the
    recovery, check the transitions the watch showed; the figures."""
    placement = _placement(await _pods(c, ns), node)
    lost = sorted(n for n, (on, off) in placement.items() if on and not off)
    degraded = sorted(n for n, (on, off) in placement.items() if on and off)
    untouched = sorted(set(expected) - set(lost) - set(degraded))
    assert lost, f"no InferenceService has all its pods on {node}: {placement}"
    pods_lost = sum(on for on, _ in placement.values())
    deleted = time.monotonic()
    await c.delete(resources.NODE, node)

    async def collected() -> bool:
        return not any(p["spec"].get("nodeName") == node for p in await _pods(c, ns))

    await wait.until(collected, timeout=TIMEOUT, what=f"PodGC deleting the pods of {node}")
    gc_s = time.monotonic() - deleted
    collected_at = time.monotonic()
    converged = await reliability.converge(c, ns, expected, timeout=TIMEOUT, since=collected_at)
    assert converged.audit.ok, f"after the loss of {node}: {converged.audit.summary()}"
    live = {objects.name(n) for n in (await c.list(resources.NODE))["items"]}
    stray = [(objects.name(p), p["spec"].get("nodeName")) for p in await _pods(c, ns)]
    assert all(on in live for _, on in stray), f"pods on nodes that do not exist: {stray}"

    await _all_available(statuses, expected)
    recover_s = time.monotonic() - collected_at
    loss = Loss(node, lost, degraded, untouched, pods_lost, gc_s, recover_s, [], [])
    _check_transitions(statuses, loss, deleted)
    assert gc_s <= POD_GC_WITHIN, f"PodGC took {gc_s:.1f} s to delete the pods of {node}"
    assert recover_s <= RECOVER_WITHIN, f"recovered {recover_s:.1f} s after PodGC"
    return loss


def _check_transitions(statuses: Statuses, loss: Loss, deleted: float) -> None:
    """What each InferenceService's status showed since the deletion (see the module docstring)."""
    for name in loss.lost:
        seen = statuses.since(name, deleted)
        down = next((i for i, s in enumerate(seen) if s.ready[0] == "False"), None)
        shown = [(s.ready[0], s.ready[1]) for s in seen]
        assert down is not None, f"{name} lost all its pods, its Ready never went False: {shown}"
        _, reason, message = seen[down].ready
        assert reason and message, f"{name}: Ready=False without a reason or message: {seen[down]}"
        rolling = [s for s in seen if ROLLING_OUT in (s.ready[1], s.available[1])]
        assert not rolling, f"{name}: a replacement called a rollout: {rolling}"
        up = next((s for s in seen[down:] if s.ready[0] == "True"), None)
        assert up is not None, f"{name}: Ready did not come back: {shown}"
        loss.false_s.append(up.at - seen[down].at)
        loss.reasons.append(f"{reason}: {message}")
    for name in loss.degraded:
        seen = statuses.since(name, deleted)
        changes = [(s.ready[0], s.available) for s in seen]
        worse = next((s for s in seen if s.ready[0] == "False" or s.available[1] == PARTIAL), None)
        assert worse is not None, f"{name} lost a replica, its status never showed it: {changes}"
        rolling = [s for s in seen if ROLLING_OUT in (s.ready[1], s.available[1])]
        assert not rolling, f"{name}: a replacement called a rollout: {rolling}"
        loss.reasons.append(f"degraded {worse.available[1]} (Ready {worse.ready[0]}/{worse.ready[1]})")
        last = seen[-1]
        assert last.ready[0] == "True" and last.available[1] == "ReplicasAvailable", (name, changes)
    for name in loss.untouched:
        flapped = [s for s in statuses.since(name, deleted) if s.ready[0] == "False"]
        assert not flapped, f"{name} lost no pod, but its Ready went False: {flapped}"


async def test_node_loss(scenario: Scenario) -> None:
    c, ns = scenario.client, scenario.namespace
    run = uuid.uuid4().hex[:6]
    names = [f"single-{i}" for i in range(SINGLE)] + [f"double-{i}" for i in range(DOUBLE)]
    replicas = {n: 2 if n.startswith("double") else 1 for n in names}
    created: list[str] = []
    losses: list[Loss] = []
    print(f"\nnode loss: {REPETITIONS} repetitions, {SINGLE} + {DOUBLE} InferenceServices (1 and 2 replicas)")
    try:
        async with (
            stages.installed(c, _loading_stage(f"rel-node-loss-{run}-load", ns)),
            operator.running(c, namespace=ns),
            _watching(c, ns) as statuses,
        ):
            for rep in range(1, REPETITIONS + 1):
                node = f"rel-node-loss-{run}-{rep}"
                await c.create(resources.NODE, _node(node))
                created.append(node)
                await nodes.wait_ready(c, [node], timeout=60)
                for name in names:
                    if rep == 1:
                        count = replicas[name]
                        manifest = isvc.manifest(
                            name,
                            framework="torchserve",
                            modelUri=model_uri(name, rep),
                            minReplicas=count,
                            maxReplicas=count,
                        )
                        await c.create(ISVC, manifest, ns)
                    else:
                        await c.patch(ISVC, name, {"spec": {"modelUri": model_uri(name, rep)}}, namespace=ns)
                want = expected({n: model_uri(n, rep) for n in names})
                ready = await reliability.converge(c, ns, want, timeout=TIMEOUT)
                assert ready.audit.ok, f"repetition {rep}, before the loss: {ready.audit.summary()}"
                await _all_available(statuses, names)
                loss = await _lose_node(c, ns, node, want, statuses)
                losses.append(loss)
                print(f"repetition {rep}: {loss}")
            regressions = statuses.history.regressions()
            events = statuses.history.events
            checked = ready.audit.checked
            children = (await reliability.audit(c, ns, want)).children
    finally:
        for node in created:
            with contextlib.suppress(rclient.ApiError):
                await c.delete(resources.NODE, node)
    assert not regressions, f"status went back: {regressions}"
    gc = [x.gc_s for x in losses]
    recover = max(x.recover_s for x in losses)
    false_s = [s for x in losses for s in x.false_s]
    down = sorted({r.split(":")[0] for x in losses for r in x.reasons if not r.startswith("degraded")})
    partly = sorted({r.split(" ")[1] for x in losses for r in x.reasons if r.startswith("degraded")})
    pods = sorted({x.pods_lost for x in losses})
    whole, some = sum(len(x.lost) for x in losses), sum(len(x.degraded) for x in losses)
    print(
        f"node loss: PodGC {min(gc):.1f}-{max(gc):.1f} s after the deletion, recovered within "
        f"{recover:.1f} s of it; Ready=False for {min(false_s):.1f}-{max(false_s):.1f} s ({down}), "
        f"degraded {partly}; {events} status events watched"
    )
    scenario.report(
        "7. Node loss",
        REPETITIONS,
        f"{REPETITIONS} kwok node(s) deleted, each holding "
        f"{'-'.join(map(str, sorted({pods[0], pods[-1]})))} predictor pods",
        checked + children,
        f"PodGC deleted the pods {min(gc):.0f}-{max(gc):.0f} s after the node (Ready=True meanwhile: "
        f"the pods still say Running/Ready); while replaced Ready=False/{'/'.join(down)} for "
        f"{min(false_s):.1f}-{max(false_s):.1f} s ({whole} InferenceServices that lost all pods) and "
        f"DeploymentAvailable {'/'.join(partly)} ({some} that lost one of two), back to True; "
        f"no status regression in {events} events",
        max_converge_s=recover,
    )
