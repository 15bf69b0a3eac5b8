"""``why``: golden files of the human output, the JSON's shape, and the child comparison held against
what the REAL reconciler wrote (on a fake client: no cluster).

Each state is played by :class:`Cluster`: the reconciler converges an InferenceService on a
:class:`~mlops_platform.testing.fakes.FakeClient` while the test plays the Deployment, HPA and
EndpointSlice controllers; pods and Events are dicts. ``why`` must then find every child in sync,
since the reconciler found nothing more to write: a difference would be a false alarm.

Regenerate the golden files after an intended change of the output with::

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_why.py

and review the diff of ``tests/unit/golden_why/`` like code.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import io
import itertools
import json
import os
import re
import tomllib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click.testing
import pytest
import yaml

from mlops_platform import api, cli, why
from mlops_platform.controllers.inferenceservice import (
    children,
    labels,
    pod_problems,
    pods_and_slices,
    reconciler,
    servers,
)
from mlops_platform.controllers.inferenceservice.children import base, monitoring, virtualservice
from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.caching import crdwatch, kinds
from mlops_platform.runtime.control import childsync
from mlops_platform.runtime.control.reconcile import Request
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import fakes
from mlops_platform.testing.isvc import manifest
from mlops_platform.why import analysis as why_analysis
from mlops_platform.why import reading as why_reading
from mlops_platform.why import report as why_report

Obj = dict[str, Any]
GOLDEN = Path(__file__).parent / "golden_why"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
ROOT = Path(__file__).parents[2]
NS, NAME, UID = "ml", "bert", "uid-bert"
ISVC = api.RESOURCE
DEP, SVC, HPA = resources.DEPLOYMENT, resources.SERVICE, resources.HPA
NOW = datetime.datetime(2026, 3, 1, 12, 0, 0, tzinfo=datetime.UTC)
MONITORING = (monitoring.PROMETHEUS_RULE, monitoring.SERVICE_MONITOR)
ISTIO = (virtualservice.KIND,)
CHILD_KINDS = {c.kind.plural: c.kind for c in children.CHILDREN}
SCHEDULER_MESSAGE = (
    "0/5 nodes are available: 5 Insufficient nvidia.com/gpu. preemption: 0/5 nodes are available: "
    "5 No preemption victims found for incoming pod."
)


def isvc(**spec: Any) -> Obj:
    spec = {"modelUri": "s3://models/bert/7", "framework": "triton", **spec}
    metadata = {
        "uid": UID,
        "generation": 1,
        "resourceVersion": "1",
        "creationTimestamp": "2026-03-01T11:00:00Z",
    }
    return manifest(NAME, namespace=NS, metadata=metadata, **spec)


def ago(seconds: int) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


class Cluster:
    """The real reconciler on a fake client; :meth:`converge` plays the cluster's controllers (the
    Deployments' replicas are available unless ``available`` is False) until it writes nothing."""

    def __init__(
        self,
        installed: tuple[kinds.Kind, ...] = MONITORING,
        *,
        available: bool = True,
        ctx: base.BuildContext | None = None,
    ) -> None:
        self.client = fakes.FakeClient()
        self.cache = rcache.Cache(self.client)
        for indexed in (resources.POD, resources.ENDPOINT_SLICE):
            self.cache.informer_for(indexed).store.add_indexers(
                {pods_and_slices.POD_INDEX: pods_and_slices.pod_index}
            )
        self.kinds = crdwatch.OptionalKinds(self.cache)
        self.crds: dict[str, Obj | None] = {k.crd_name: None for k in why_reading.OPTIONAL_KINDS}
        for kind in why_reading.OPTIONAL_KINDS:
            self.kinds.register(kind)
        for kind in installed:
            crd = fakes.crd(kind)
            self.crds[kind.crd_name] = crd
            fakes.seed(self.cache, resources.CRD, [crd])
            self.kinds.on_add(crd)
            fakes.seed(self.cache, kind.resource(), [], optional=True)
        self.available = available
        self.ctx = ctx or base.BuildContext()
        self.rec = reconciler.InferenceServiceReconciler(
            self.cache, self.client, fakes.FakeRecorder(), self.kinds, self.ctx
        )
        self.slices: list[Obj] = []
        self._rv = itertools.count(1000)

    def _changed(self, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        return obj

    def _resource(self, plural: str) -> rclient.Resource | None:
        kind = CHILD_KINDS.get(plural)
        return None if kind is None else self.kinds.resolve(kind)

    def _play_controllers(self, res: rclient.Resource, obj: Obj) -> Obj:
        """The status a child's controller would write (the canary always available)."""
        n = int(obj["spec"].get("replicas", 1)) if res == DEP else 0
        ready = n if self.available or obj["metadata"]["name"].endswith("-canary") else 0
        return fakes.controller_status(res, obj, ready=ready)

    def _mirror(self) -> None:
        for (plural, ns, _), obj in list(self.client.objects.items()):
            res = self._resource(plural)
            if res is None:
                continue
            obj = self.client.objects[(plural, ns, obj["metadata"]["name"])] = self._play_controllers(
                res, obj
            )
            fakes.seed(self.cache, res, [self._changed(obj)], optional=CHILD_KINDS[plural].optional)
        for res in {self._resource(p) for p in CHILD_KINDS} - {None}:
            assert res is not None
            if self.cache.has_informer(res):
                store = self.cache.informer_for(res).store
                for key in store.list_keys():
                    if self.client.stored(res, *key.split("/", 1)) is None:
                        store.delete_key(key)
        canary = self.client.stored(DEP, NS, f"{NAME}-canary")
        self.slices = []
        if canary is not None and self.client.stored(SVC, NS, f"{NAME}-canary") is not None:
            ready = int(canary["status"]["availableReplicas"])
            self.slices = [
                {
                    "metadata": {
                        "name": f"{NAME}-canary-x8k2p",
                        "namespace": NS,
                        "labels": {labels.INFERENCESERVICE: NAME, labels.COMPONENT: labels.CANARY},
                    },
                    "endpoints": [{"conditions": {"ready": True}} for _ in range(ready)],
                }
            ]
        store = self.cache.informer_for(resources.ENDPOINT_SLICE).store
        for key in store.list_keys():
            store.delete_key(key)
        for s in self.slices:
            store.upsert(self._changed(pods_and_slices.slim_slice(s)))
        fakes.seed(self.cache, ISVC, [self._changed(self.client.objects[(ISVC.plural, NS, NAME)])])

    async def converge(self, raw: Obj, pods: Sequence[Obj] = ()) -> None:
        self.client.objects[(ISVC.plural, NS, NAME)] = copy.deepcopy(raw)
        fakes.seed(self.cache, ISVC, [self._changed(raw)])
        fakes.seed(self.cache, resources.POD, [pods_and_slices.slim_pod(p) for p in pods])
        for _ in range(10):
            self.client.reset_calls()
            await self.rec.reconcile(Request(NS, NAME))
            if not self.client.calls:
                return
            self._mirror()
        raise AssertionError(f"no steady state: {self.client.keys}")

    def snapshot(
        self, pods: Sequence[Obj] = (), events: Sequence[Obj] = (), errors: Mapping[str, str] | None = None
    ) -> why.Snapshot:
        lives: dict[tuple[str, str], Obj | None] = {}
        for (plural, _, name), obj in self.client.objects.items():
            kind = CHILD_KINDS.get(plural)
            if kind is not None:
                lives[(why_reading.group_resource(kind), name)] = copy.deepcopy(obj)
        return why.Snapshot(
            raw=copy.deepcopy(self.client.objects[(ISVC.plural, NS, NAME)]),
            crds=dict(self.crds),
            children=lives,
            canary_slices=tuple(self.slices),
            pods=tuple(pods),
            events=tuple(events),
            errors=dict(errors or {}),
        )


# -- pods and Events, as the API serves them -------------------------------------------------------


def pod(
    suffix: str,
    *,
    component: str = labels.PREDICTOR,
    phase: str = "Running",
    ready: bool = True,
    node: str | None = "kwok-cpu-0",
    waiting: tuple[str, str] | None = None,
    restarts: int = 0,
    last: tuple[str, int] | None = None,
    unschedulable: str | None = None,
    model: str = "s3://models/bert/7",
) -> Obj:
    name = f"{NAME}-{component}-7d9f8c6b5-{suffix}"
    state: Obj = (
        {"waiting": {"reason": waiting[0], "message": waiting[1]}}
        if waiting
        else {"running": {"startedAt": ago(600)}}
    )
    container: Obj = {"name": "predictor", "ready": ready, "restartCount": restarts, "state": state}
    if last is not None:
        container["lastState"] = {
            "terminated": {"reason": last[0], "exitCode": last[1], "finishedAt": ago(30)}
        }
    conditions: list[Obj] = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable is not None:
        conditions = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        ]
    obj: Obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {labels.INFERENCESERVICE: NAME, labels.COMPONENT: component},
            "annotations": {labels.MODEL_URI_ANNOTATION: model},
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase, "conditions": conditions},
    }
    if unschedulable is None:
        obj["status"]["containerStatuses"] = [container]
    return obj


def event(
    kind: str, name: str, reason: str, note: str, seconds_ago: int, *, type_: str = "Normal", count: int = 1
) -> Obj:
    out: Obj = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {
            "name": f"{name}.{reason.lower()}",
            "namespace": NS,
            "creationTimestamp": ago(seconds_ago + 60),
        },
        "regarding": {"kind": kind, "name": name, "namespace": NS},
        "reason": reason,
        "note": note,
        "type": type_,
        "eventTime": ago(seconds_ago) if count == 1 else ago(seconds_ago + 300),
    }
    if count > 1:
        out["series"] = {"count": count, "lastObservedTime": ago(seconds_ago)}
    return out


CREATED = event(
    "InferenceService",
    NAME,
    "Created",
    f"created Deployment/{NAME}-predictor, Service/{NAME}-predictor, PrometheusRule/{NAME}, "
    f"ServiceMonitor/{NAME}",
    3600,
)
#: an Event of another InferenceService whose name starts like this one's pods: never shown
OTHER = event("Pod", f"{NAME}-predictor-v2-predictor-5f6d7c8b9-abcde", "Killing", "Stopping container", 5)


# -- the states ----------------------------------------------------------------------------------


async def serving(seen: list[Cluster] | None = None) -> why.Snapshot:
    c = Cluster()
    if seen is not None:
        seen.append(c)
    pods = [pod("a1b2c"), pod("d3e4f")]
    await c.converge(isvc(framework="torchserve", minReplicas=2, maxReplicas=5), pods)
    scaled = event(
        "Deployment",
        f"{NAME}-predictor",
        "ScalingReplicaSet",
        "Scaled up replica set bert-predictor-7d9f8c6b5 from 0 to 2",
        3590,
    )
    return c.snapshot(pods, [CREATED, scaled, OTHER])


async def crashloop(seen: list[Cluster] | None = None) -> why.Snapshot:
    c = Cluster(available=False)
    if seen is not None:
        seen.append(c)
    pods = [
        pod(
            "x7k2q",
            ready=False,
            waiting=(
                "CrashLoopBackOff",
                "back-off 5m0s restarting failed container=predictor pod=bert-predictor-7d9f8c6b5-x7k2q_ml",
            ),
            restarts=7,
            last=("OOMKilled", 137),
        )
    ]
    await c.converge(isvc(), pods)
    back_off = event(
        "Pod",
        pods[0]["metadata"]["name"],
        "BackOff",
        "Back-off restarting failed container predictor",
        12,
        type_="Warning",
        count=31,
    )
    gone = event("Pod", f"{NAME}-predictor-6c8d7e5f4-q9w8e", "Killing", "Stopping container predictor", 900)
    return c.snapshot(pods, [CREATED, back_off, gone, OTHER])


async def unschedulable_gpu(seen: list[Cluster] | None = None) -> why.Snapshot:
    c = Cluster(available=False)
    if seen is not None:
        seen.append(c)
    pods = [pod("p0d5x", phase="Pending", ready=False, node=None, unschedulable=SCHEDULER_MESSAGE)]
    await c.converge(isvc(gpuPerReplica=16), pods)
    failed = event(
        "Pod",
        pods[0]["metadata"]["name"],
        "FailedScheduling",
        SCHEDULER_MESSAGE,
        40,
        type_="Warning",
        count=4,
    )
    return c.snapshot(pods, [CREATED, failed])


async def canary_split(seen: list[Cluster] | None = None) -> why.Snapshot:
    c = Cluster(MONITORING + ISTIO)
    if seen is not None:
        seen.append(c)
    pods = [pod(s) for s in ("a1", "b2", "c3", "d4")] + [
        pod("e5", component=labels.CANARY, model="s3://models/bert/8")
    ]
    await c.converge(
        isvc(minReplicas=4, maxReplicas=4, traffic={"canaryVersion": "8", "canaryPercent": 20}), pods
    )
    note = "updated VirtualService/bert (spec.http[0].route[0].weight, spec.http[0].route[1])"
    return c.snapshot(pods, [CREATED, event("InferenceService", NAME, "Updated", note, 120)])


async def drift(seen: list[Cluster] | None = None) -> why.Snapshot:
    """Serving, then edited behind the operator's back while it is not running: the image changed,
    the Service deleted, a canary Deployment left behind; and pods not readable."""
    c = Cluster()
    if seen is not None:
        seen.append(c)
    await c.converge(isvc(framework="torchserve"))
    dep = c.client.objects[("deployments", NS, f"{NAME}-predictor")]
    dep["spec"]["template"]["spec"]["containers"][0]["image"] = "torchserve:hotfix"
    dep["spec"]["template"]["metadata"]["labels"]["team"] = "ml"  # extra: fine (subset)
    del c.client.objects[("services", NS, f"{NAME}-predictor")]
    stale = copy.deepcopy(dep)
    stale["metadata"]["name"] = f"{NAME}-canary"
    c.client.objects[("deployments", NS, f"{NAME}-canary")] = stale
    forbidden = (
        '403 Forbidden: pods is forbidden: User "jane" cannot list resource "pods" in the namespace "ml"'
    )
    return c.snapshot([], [CREATED], {"pods": forbidden})


STATES: dict[str, Callable[..., Awaitable[why.Snapshot]]] = {
    "serving": serving,
    "crashloop": crashloop,
    "unschedulable-gpu": unschedulable_gpu,
    "canary-split": canary_split,
    "drift": drift,
}


async def report_of(state: str, ctx: base.BuildContext | None = None) -> why.Report:
    return why.analyze(await STATES[state](), ctx, now=NOW)


@pytest.mark.parametrize("state", list(STATES))
async def test_golden(state: str) -> None:
    text = why.render_text(await report_of(state), width=100)
    path = GOLDEN / f"{state}.txt"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{state} differs from {path.name}: review, then UPDATE_GOLDEN=1"


def test_no_orphan_golden_files() -> None:
    assert {p.stem for p in GOLDEN.glob("*.txt")} == set(STATES)


# -- what the operator would change ------------------------------------------------------------------


@pytest.mark.parametrize("state", ["serving", "crashloop", "unschedulable-gpu", "canary-split"])
async def test_every_child_the_reconciler_settled_is_in_sync(state: str) -> None:
    r = await report_of(state)
    assert r.children, "no child compared"
    assert {c.action for c in r.children} == {"in-sync"}, [(c.name, c.action, c.paths) for c in r.children]
    assert r.changes == ()
    assert "would change" not in r.summary


@pytest.mark.parametrize("state", ["serving", "crashloop", "unschedulable-gpu", "canary-split"])
async def test_the_rollout_is_the_one_the_reconciler_decides(state: str) -> None:
    # why copies the body of the reconciler's _rollout (cache reads -> live reads): the two must
    # decide alike on the same objects (remove once the reconciler offers it as a function)
    seen: list[Cluster] = []
    snap = await STATES[state](seen)
    (c,) = seen
    isvc_ = api.decode(snap.raw)
    ours = why_analysis._rollout(isvc_, c.ctx, snap)
    assert ours == c.rec._rollout(isvc_)
    assert ours.plan.phase.value == why.analyze(snap, now=NOW).phase


async def test_children_are_the_slots_the_reconciler_wrote() -> None:
    r = await report_of("canary-split")
    assert [(c.kind, c.name) for c in r.children] == [
        ("Deployment", "bert-predictor"),
        ("Service", "bert-predictor"),
        ("Deployment", "bert-canary"),
        ("Service", "bert-canary"),
        ("VirtualService", "bert"),
        ("PrometheusRule", "bert"),
        ("ServiceMonitor", "bert"),
    ]
    assert (r.router, r.phase) == ("istio", "Canary")


async def test_drift_shows_the_update_paths_the_missing_child_and_the_deletion() -> None:
    r = await report_of("drift")
    by_name = {(c.kind, c.name): c for c in r.children}
    dep = by_name[("Deployment", "bert-predictor")]
    assert dep.action == "update"
    assert dep.paths == ("spec.template.spec.containers[0].image",)  # the extra label is no change
    assert by_name[("Service", "bert-predictor")].action == "missing"
    assert by_name[("Deployment", "bert-canary")].action == "delete"
    assert by_name[("PrometheusRule", "bert")].action == "in-sync"
    assert len(r.changes) == 3
    assert r.summary.endswith("(the operator would change 3 children)")
    assert list(r.errors) == ["pods"] and "cannot list" in r.errors["pods"]


async def test_a_child_controlled_by_another_owner_is_a_conflict_and_an_uncontrolled_one_is_left_alone() -> (
    None
):
    snap = await STATES["serving"]()
    lives = dict(snap.children)
    svc = copy.deepcopy(lives[("services", "bert-predictor")])
    assert svc is not None
    svc["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    lives[("services", "bert-predictor")] = svc
    netpol = {"metadata": {"name": NAME, "namespace": NS}, "spec": {}}  # a user's own, same name
    lives[("networkpolicies.networking.k8s.io", NAME)] = netpol
    r = why.analyze(why.Snapshot(snap.raw, snap.crds, lives), now=NOW)
    by_name = {(c.kind, c.name): c for c in r.children}
    assert by_name[("Service", "bert-predictor")].action == "conflict"
    assert (
        "controlled by InferenceService/bert (uid someone-else)"
        in by_name[("Service", "bert-predictor")].message
    )
    assert by_name[("NetworkPolicy", "bert")].action == "foreign"
    assert r.changes == ()


async def test_the_settings_must_match_the_operators_flags() -> None:
    snap = await canary_split()
    r = why.analyze(snap, base.BuildContext(router=base.Router.REPLICAS), now=NOW)
    by_name = {(c.kind, c.name): c for c in r.children}
    assert by_name[("VirtualService", "bert")].action == "delete"
    # the replicas router selects both components: the selector loses a key, which only the hash sees
    assert by_name[("Service", "bert-predictor")].paths == (why_report.HASH_PATH,)
    assert r.settings == {"--traffic-router": "replicas"}
    gw = why.analyze(snap, base.BuildContext(router=base.Router.GATEWAY_API, gateway="infra/gw"), now=NOW)
    assert [(c.kind, c.action) for c in gw.changes] == [("VirtualService", "delete")]
    # an explicit router whose CRD is absent: nothing the operator could create, said so
    route = next(c for c in gw.children if c.kind == "HTTPRoute")
    assert (route.action, route.message) == (
        "crd-missing",
        "gateway.networking.k8s.io HTTPRoute is not installed: nothing to apply",
    )
    assert gw.settings == {"--traffic-router": "gateway-api", "--gateway": "infra/gw"}


async def test_an_absent_crd_is_reported_not_compared() -> None:
    snap = await serving()
    r = why.analyze(dataclasses.replace(snap, crds={}), now=NOW)
    by_name = {(c.kind, c.name): c for c in r.children}
    assert by_name[("PrometheusRule", "bert")].action == "crd-missing"
    assert by_name[("PrometheusRule", "bert")].message.startswith(
        "monitoring.coreos.com PrometheusRule is not installed"
    )
    assert r.changes == ()


async def test_an_invalid_spec_compares_no_children() -> None:
    raw = isvc(framework="triton", port=8001)  # Triton's own gRPC port: the reconciler refuses it
    r = why.analyze(why.Snapshot(raw), now=NOW)
    assert r.children == ()
    assert r.spec_problem.startswith("InvalidSpec: spec.predictor.port: port 8001 is the")
    assert r.summary.startswith("bert: not serving — InvalidSpec: spec.predictor.port")


async def test_a_runtime_the_table_lacks_is_the_reconcilers_invalid_spec() -> None:
    table = {k: v for k, v in servers.default_table().items() if k != "seldon"}
    r = why.analyze(why.Snapshot(isvc(framework="seldon")), base.BuildContext(servers=table), now=NOW)
    assert r.children == ()
    assert r.spec_problem == (
        "InvalidSpec: spec.predictor.runtime: no runtime 'seldon' in the runtime table "
        "(known: torchserve, triton)"
    )


def test_prepare_is_what_the_child_syncer_prepares() -> None:
    target = base.slots(api.decode(isvc()), children.CHILDREN)[0].target
    owner = isvc()
    ours, theirs = children.CHILDREN[0].build(target, base.BuildContext()), None
    assert ours is not None
    theirs = copy.deepcopy(ours)
    syncer = childsync.ChildSyncer(
        fakes.FakeClient(), field_manager=labels.MANAGER, hash_annotation=reconciler.HASH_ANNOTATION
    )
    assert why_analysis.prepare(ours, owner) == syncer.prepare(theirs, owner)
    assert ours["metadata"]["annotations"][reconciler.HASH_ANNOTATION]


# -- summary, pods, Events ---------------------------------------------------------------------------


async def test_summaries_name_the_cause() -> None:
    assert (await report_of("serving")).summary == "bert: serving — Serving: 2/2 replicas ready"
    crash = (await report_of("crashloop")).summary
    assert crash.startswith(
        "bert: not serving — CrashLoopBackOff: pod bert-predictor-7d9f8c6b5-x7k2q container predictor: "
        "back-off 5m0s"
    )
    assert crash.endswith("(last terminated: OOMKilled, exit code 137)")
    gpu = (await report_of("unschedulable-gpu")).summary
    assert (
        gpu == f"bert: not serving — Unschedulable: pod bert-predictor-7d9f8c6b5-p0d5x: {SCHEDULER_MESSAGE}"
    )


async def test_a_failed_model_download_is_named_as_the_status_names_it() -> None:
    snap = await crashloop()
    failed = copy.deepcopy(snap.pods[0])
    failed["status"] = {
        "phase": "Pending",
        "initContainerStatuses": [
            {
                "name": "storage-initializer",
                "ready": False,
                "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
                "lastState": {
                    "terminated": {
                        "exitCode": 1,
                        "reason": "Error",
                        "message": "model download failed: 403\n",
                    }
                },
            }
        ],
        "containerStatuses": [
            {"name": "predictor", "ready": False, "state": {"waiting": {"reason": "PodInitializing"}}}
        ],
    }
    r = why.analyze(dataclasses.replace(snap, pods=[failed]), now=NOW)
    name = failed["metadata"]["name"]
    assert r.summary == f"bert: not serving — ModelDownloadFailed: pod {name}: model download failed: 403"
    assert pod_problems.pod_problem([failed]) == (
        "ModelDownloadFailed",
        f"pod {name}: model download failed: 403",
    )


async def test_a_status_behind_the_spec_says_so() -> None:
    snap = await serving()
    raw = copy.deepcopy(snap.raw)
    raw["metadata"]["generation"] = 2
    r = why.analyze(dataclasses.replace(snap, raw=raw), now=NOW)
    assert not r.up_to_date
    assert "(the status is of generation 1, the spec at 2)" in r.summary


async def test_events_are_ours_newest_first_and_bounded() -> None:
    r = await report_of("crashloop")
    assert [e.reason for e in r.events] == ["BackOff", "Killing", "Created"]  # not the other service's
    assert r.events[0].count == 31 and r.events[0].age == "12s" and r.events[0].type == "Warning"
    assert r.events[1].object == "Pod/bert-predictor-6c8d7e5f4-q9w8e" and r.events[1].age == "15m"
    assert r.events[2].age == "60m"
    bounded = why.analyze(await crashloop(), now=NOW, max_events=1)
    assert [e.reason for e in bounded.events] == ["BackOff"] and bounded.events_total == 3


async def test_pods_report_the_container_state_and_the_scheduler() -> None:
    crash = (await report_of("crashloop")).pods[0]
    (c,) = crash.containers
    assert (c.state, c.reason, c.restarts, c.last_reason, c.last_exit_code) == (
        "waiting",
        "CrashLoopBackOff",
        7,
        "OOMKilled",
        137,
    )
    assert c.failing and crash.problem and not crash.ready
    gpu = (await report_of("unschedulable-gpu")).pods[0]
    assert gpu.unscheduled == ("Unschedulable", SCHEDULER_MESSAGE)
    assert (gpu.phase, gpu.node) == ("Pending", "")


# -- JSON ----------------------------------------------------------------------------------------


async def test_json_shape() -> None:
    out = why.to_json(await report_of("crashloop"))
    assert json.loads(json.dumps(out)) == out  # plain JSON
    assert list(out) == [
        "name", "namespace", "summary", "serving", "generation", "observedGeneration", "upToDate", "url",
        "conditions", "traffic", "rollout", "settings", "specProblem", "caveats", "children", "wouldChange",
        "pods", "events", "eventsTotal", "errors", "health", "analysis",
    ]  # fmt: skip
    assert (out["name"], out["namespace"], out["serving"], out["url"]) == ("bert", "ml", False, None)
    assert (out["generation"], out["observedGeneration"], out["upToDate"]) == (1, 1, True)
    assert out["conditions"][0]["type"] == "Ready"
    assert set(out["conditions"][0]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    assert (out["conditions"][0]["status"], out["conditions"][0]["reason"]) == ("False", "CrashLoopBackOff")
    assert out["rollout"] == {"router": "replicas", "phase": "Stable", "message": "no canary"}
    assert out["children"][0] == {
        "slot": "predictor/deployment", "kind": "Deployment", "name": "bert-predictor", "action": "in-sync",
        "paths": [], "message": "",
    }  # fmt: skip
    assert out["wouldChange"] == 0
    (p,) = out["pods"]
    assert p["unscheduled"] is None and p["restarts"] == 7 and p["node"] == "kwok-cpu-0"
    assert p["containers"][0]["lastTermination"] == {"reason": "OOMKilled", "exitCode": 137, "message": None}
    assert out["events"][0] == {
        "type": "Warning", "reason": "BackOff", "note": "Back-off restarting failed container predictor",
        "object": "Pod/bert-predictor-7d9f8c6b5-x7k2q", "count": 31, "lastSeen": "2026-03-01T11:59:48Z",
        "age": "12s",
    }  # fmt: skip
    assert out["eventsTotal"] == 3 and out["errors"] == {}


async def test_json_of_a_canary_carries_the_effective_split() -> None:
    out = why.to_json(await report_of("canary-split"))
    assert [(t["component"], t["percent"], t["version"]) for t in out["traffic"]] == [
        ("predictor", 80, "7"),
        ("canary", 20, "8"),
    ]
    assert out["rollout"]["phase"] == "Canary"


async def test_json_of_drift_lists_every_change_and_the_unreadable_part() -> None:
    out = why.to_json(await report_of("drift"))
    changed = [(c["kind"], c["name"], c["action"]) for c in out["children"] if c["action"] != "in-sync"]
    assert changed == [
        ("Deployment", "bert-predictor", "update"),
        ("Service", "bert-predictor", "missing"),
        ("Deployment", "bert-canary", "delete"),
    ]
    assert out["wouldChange"] == 3
    assert list(out["errors"]) == ["pods"]


# -- terminal ----------------------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.mark.parametrize("state", list(STATES))
async def test_colour_only_when_asked_and_the_same_text_underneath(state: str) -> None:
    r = await report_of(state)
    plain = why.render_text(r, width=100)
    coloured = why.render_text(r, width=100, color=True)
    assert not ANSI.search(plain)
    assert ANSI.search(coloured)
    assert ANSI.sub("", coloured) == plain


@pytest.mark.parametrize("width", [60, 80, 140])
async def test_lines_fit_the_width(width: int) -> None:
    for state in STATES:
        text = why.render_text(await report_of(state), width=width)
        # only a line with a word too long to wrap (a URL, a pod name) may stick out
        too_long = [
            line for line in text.splitlines() if len(line) > width and max(map(len, line.split())) < 25
        ]
        assert too_long == [], (state, too_long)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("stream", "no_color", "expected"),
    [(_Tty(), None, True), (_Tty(), "1", False), (io.StringIO(), None, False)],
    ids=["tty", "tty-NO_COLOR", "pipe"],
)
def test_colour_follows_the_terminal(
    stream: io.StringIO, no_color: str | None, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    if no_color is not None:
        monkeypatch.setenv("NO_COLOR", no_color)
    assert why.use_color(stream) is expected


def test_width_follows_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "73")
    assert why.terminal_width() == 73


# -- the reads, on a fake client ---------------------------------------------------------------------


async def _fake_cluster(
    state: Callable[[], Awaitable[why.Snapshot]],
) -> tuple[fakes.FakeClient, why.Snapshot]:
    """A fake API holding the objects of ``state``."""
    snap = await state()
    client = fakes.FakeClient()
    client.objects[(ISVC.plural, NS, NAME)] = snap.raw
    for (group_resource, name), obj in snap.children.items():
        assert obj is not None
        client.objects[(group_resource.split(".", 1)[0], NS, name)] = obj
    for crd in snap.crds.values():
        if crd is not None:
            client.objects[("customresourcedefinitions", None, crd["metadata"]["name"])] = crd
    for p in snap.pods:
        client.objects[("pods", NS, p["metadata"]["name"])] = p
    for e in snap.events:
        client.objects[("events", NS, e["metadata"]["name"])] = e
    for s in snap.canary_slices:
        client.objects[("endpointslices", NS, s["metadata"]["name"])] = s
    return client, snap


async def test_read_gathers_what_analyze_needs_and_reports_what_it_may_not_read() -> None:
    client, snap = await _fake_cluster(canary_split)
    client.fail("list", "events")
    got = await why.read(client, NS, NAME)
    assert got.raw == snap.raw
    assert {k: v for k, v in got.children.items() if v is not None} == snap.children
    assert got.crds == snap.crds
    assert got.canary_slices == snap.canary_slices
    assert sorted(p["metadata"]["name"] for p in got.pods) == sorted(p["metadata"]["name"] for p in snap.pods)
    assert got.events == ()
    assert (
        list(got.errors) == ["events.events.k8s.io"] and "cannot list" in got.errors["events.events.k8s.io"]
    )
    r = why.analyze(got, now=NOW)
    assert {c.action for c in r.children} == {"in-sync"}
    assert r.caveats == ()


async def test_unreadable_pods_of_a_canary_are_a_caveat_of_the_comparison() -> None:
    client, _ = await _fake_cluster(canary_split)
    client.fail("list", "pods")
    r = why.analyze(await why.read(client, NS, NAME), now=NOW)
    assert r.caveats == (
        "pods not readable: the canary counts as not ready, so the route may compare otherwise than the "
        "operator decides",
    )
    assert r.caveats[0] in " ".join(why.render_text(r).split())
    assert why.to_json(r)["caveats"] == list(r.caveats)


async def test_read_raises_not_found() -> None:
    with pytest.raises(why.NotFound, match='inferenceservice "bert" not found in namespace "ml"'):
        await why.read(fakes.FakeClient(), NS, NAME)


async def test_the_documented_rules_cover_every_read() -> None:
    client, _ = await _fake_cluster(canary_split)
    await why.read(client, NS, NAME)
    rules = why.read_rules()
    made = {(c.verb, c.resource) for c in client.calls}
    assert ("get", "virtualservices") in made and ("list", "events") in made
    uncovered = [
        (verb, plural)
        for verb, plural in made
        if not any(plural in r["resources"] and verb in r["verbs"] for r in rules)
    ]
    assert uncovered == []
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in rules)  # read-only


async def test_unreadable_crds_make_the_optional_children_unreadable_not_absent() -> None:
    snap = await serving()
    denied = "403 Forbidden: customresourcedefinitions.apiextensions.k8s.io is forbidden"
    errors = {
        f"customresourcedefinitions.apiextensions.k8s.io/{k.crd_name}": denied
        for k in why_reading.OPTIONAL_KINDS
    }
    r = why.analyze(dataclasses.replace(snap, crds={}, errors=errors), now=NOW)
    rule = next(c for c in r.children if c.kind == "PrometheusRule")
    assert rule.action == "unreadable"
    assert rule.message == f"CustomResourceDefinition prometheusrules.monitoring.coreos.com: {denied}"
    assert r.changes == ()


def test_the_documented_cluster_role_is_read_rules() -> None:
    text = (ROOT / "docs" / "why.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (role,) = [yaml.safe_load(b) for b in blocks if "kind: ClusterRole" in b]
    assert role["rules"] == why.read_rules()


# -- the commands ----------------------------------------------------------------------------------


def test_the_kubectl_plugin_is_a_console_script_with_the_why_command() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-mlops"] == "mlops_platform.cli:kubectl_plugin"
    result = click.testing.CliRunner().invoke(cli.plugin, ["why", "--help"], prog_name="kubectl mlops")
    assert result.exit_code == 0, result.output
    assert "Usage: kubectl mlops why [OPTIONS] NAME" in result.output
    for option in (
        "-n, --namespace",
        "-o, --output",
        "--kubeconfig",
        "--context",
        "--traffic-router",
        "--gateway",
    ):
        assert option in result.output


def test_why_names_a_bad_kubeconfig_and_a_bad_gateway(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = click.testing.CliRunner().invoke(cli.main, ["why", NAME, "--kubeconfig", str(missing)])
    assert result.exit_code == 2  # a usage error, as for every command taking --kubeconfig
    assert f"Error: --kubeconfig {missing}: cannot read it: No such file" in result.output
    result = click.testing.CliRunner().invoke(cli.main, ["why", NAME, "-n", NS, "--gateway", "bad"])
    assert result.exit_code == 2 and "must be NAMESPACE/NAME" in result.output


def test_why_takes_the_operators_runtime_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"runtimes.yaml": "Acme: {basedOn: triton}"}))
    result = click.testing.CliRunner().invoke(cli.main, ["why", NAME, "--runtime-config", str(bad)])
    assert result.exit_code == 1
    assert result.output.startswith("Error: --runtime-config: runtimes.yaml: Acme: not a valid runtime name")
    good = tmp_path / "runtimes.yaml"
    good.write_text(yaml.safe_dump({"runtimes.yaml": "triton-large: {basedOn: triton}"}))
    seen: list[base.BuildContext] = []

    async def collect(*args: Any, **kwargs: Any) -> why.Report:
        seen.append(args[4])
        raise why.WhyError("stop here")

    monkeypatch.setattr(why, "collect", collect)
    result = click.testing.CliRunner().invoke(cli.main, ["why", NAME, "--runtime-config", str(good)])
    assert result.output == "Error: stop here\n"
    assert set(seen[0].servers) == {"triton", "seldon", "torchserve", "triton-large"}


def test_a_container_that_stopped_silently_is_explained_by_its_previous_logs_last_error() -> None:
    from mlops_platform.why import reading

    log = "\n".join(
        [
            "2026-12-06 08:14:09,700 [mlserver.parallel] ERROR - An error occurred processing a model update",
            "Traceback (most recent call last):",
            '  File "/opt/venv/lib/python3.11/site-packages/joblib/numpy_pickle.py", line 577, in _unpickle',
            "_pickle.UnpicklingError: invalid load key, 'n'.",
            "INFO:     Shutting down",
            "2026-12-06 08:14:10,480 [mlserver.parallel] INFO - Shutdown of default inference pool complete",
        ]
    )
    assert reading.last_error(log) == "_pickle.UnpicklingError: invalid load key, 'n'."
    assert reading.last_error("a\n[x] ERROR - it broke\nINFO done\n") == "[x] ERROR - it broke"
    assert reading.last_error("INFO all good\n") == ""
    silent = {"name": "predictor", "lastState": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    said = {"name": "sidecar", "lastState": {"terminated": {"exitCode": 1, "message": "boom"}}}
    never = {"name": "fresh", "state": {"running": {}}}
    stopping = {"name": "now", "state": {"terminated": {"exitCode": 0}}, "lastState": {"terminated": {}}}
    failed = {"name": "failed", "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    statuses = [silent, said, never, stopping, failed]
    pod = {"metadata": {"name": "p"}, "status": {"containerStatuses": statuses}}
    assert reading.silent_stops(pod) == [("predictor", True), ("now", False)]
    line = reading.last_error(log)
    report = why.observed.pod_report(pod, {("p", "predictor"): line})
    predictor = next(c for c in report.containers if c.name == "predictor")
    assert predictor.last_message == f"its log: {line}"


def test_why_names_a_scrape_interval_that_is_not_the_default_among_its_settings() -> None:
    """The ServiceMonitor it compares carries ``--scrape-interval``: a reader must see which it assumed."""
    from mlops_platform.why import analysis

    assert "--scrape-interval" not in analysis.settings_of(base.BuildContext())
    assert analysis.settings_of(base.BuildContext(scrape_interval="10s"))["--scrape-interval"] == "10s"
