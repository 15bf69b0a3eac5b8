"""Scenario 6, throttling: API Priority and Fairness squeezes the operator's user to a trickle while
InferenceServices are created and changed; the operator honours ``429`` Retry-After, never spins,
its queue depth and retries show the squeeze, and it converges once the squeeze lifts.

The operator is ``mlops-platform run`` as a process of its own, with leader election (the
defaults: 15 s / 10 s / 2 s) and 4 workers, authenticated as a ServiceAccount bound only to its
generated RBAC (namespaced mode). The squeeze: a PriorityLevelConfiguration of type Limited with no
nominal concurrency shares, nothing lendable and nothing to borrow, ``Reject`` (no queues): the API
server runs one request of that level at a time and answers every other one ``429`` with a
Retry-After (1 s, doubled by the server while the rejections go on, up to 32 s; the client honours
up to 30 s). A FlowSchema sends there every request of the ServiceAccount to the API groups its
RBAC names, but its Lease's (matching precedence 1000: ahead of the built-in ``service-accounts``
schema, 9000, that would match it otherwise; ``exempt``, 1, matches ``system:masters`` only, so the
test's admin client is not squeezed). Leader election is left out as Kubernetes' own controllers
have their Leases at a level apart (``leader-election``): squeezed too, a renewal waiting out a
Retry-After longer than the renew deadline loses the Lease and the process exits, by design.

One squeeze: the InferenceServices are created and converged, the FlowSchema applied (in effect
once the API server reports it not dangling), then for ``SQUEEZE`` seconds an admin writer rolls
out a new ``modelUri`` for every InferenceService every ``ROUND`` seconds and creates new ones,
while the operator's ``/metrics`` are sampled. Then the FlowSchema and the priority level are
deleted and :func:`reliability.converge` runs from that moment. Checked:

- the squeeze was real: the operator counted 429 answers (``rest_client_requests_total``), as
  many as the API server says it rejected of that level
  (``apiserver_flowcontrol_rejected_requests_total``, from its own /metrics);
- Retry-After honoured, from the server's side: in the API server's audit log (every write of the
  operator's kinds, with its answer; read once the run is over), writes of the ServiceAccount were
  answered 429, no more of them than the operator counted 429s, and every one is followed by its
  next attempt (same verb and object) no sooner than 1 s, the least Retry-After the server sends;
- no spinning: the operator's 429s per second stay below one per request it can have in flight at
  once (the most a client waiting >= 1 s after each 429 can get);
- the squeeze shows in the operator's metrics: ``workqueue_depth`` rose above its idle 0 (the
  workers wait out Retry-After inside their requests, the changes pile up in the queue), and the
  client's retries (``rest_client_request_retries_total``, client-go's: every 429 but the last of
  eleven is sent again after its Retry-After) grew, at most one per 429.
  ``workqueue_retries_total`` is printed and checked to hold every failed reconcile, but not
  required to grow: like client-go's, the client tries a 429'd request ten times before the
  reconcile fails and is re-queued, so it moves only when one request is refused eleven times in a
  row (seen in some full runs, never in a reduced one); every reconcile that failed, failed on a
  429 (nothing else broke: see below);
- convergence after the lift within ``CONVERGE_WITHIN`` (the longest Retry-After the client
  honours, 30 s, plus the reconciles), every object audited, no status went back to an older
  generation, and the operator process kept running and leading throughout.

Found while building this scenario (fixed in the client, unit tests in
``tests/unit/runtime/test_throttled_answers.py``): a 429 in plain text gave an error whose reason
was "Too Many Requests", which the reconciler wrote into the ``Reconciled`` condition and the API
server refused (422): a throttled apply was never reported; and a watch answered 429 was tried
again after 1 s whatever the server's Retry-After.

Run with ``-s`` for the figures.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import itertools
import json
import time
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from mlops_platform.controllers.inferenceservice import controller
from mlops_platform.controllers.inferenceservice.children import CHILDREN
from mlops_platform.deploy import rbac as deploy_rbac
from mlops_platform.devcluster import cluster
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import codec
from mlops_platform.testing import identity, isvc, operator, reliability, wait
from mlops_platform.testing.scenario import Scenario, expected, model_uri, one_replica, work

ISVC = isvc.RESOURCE  # v1alpha1 objects: every write goes through the conversion webhook
OBJECTS = reliability.scale(30, 10)
#: InferenceServices the writer creates during the squeeze (besides its modelUri changes)
CREATED = reliability.scale(10, 4)
SQUEEZE = reliability.scale(60, 12)
#: the writer's rollouts: one every ROUND seconds (load pacing, not synchronisation), WRITERS
#: InferenceServices written at once
ROUND, WRITERS = 3.0, 5
#: the operator's reconcile workers
WORKERS = 4
LEASE_ID = "reliability-throttling"
#: matched ahead of every built-in FlowSchema that could match a ServiceAccount (service-accounts:
#: 9000, global-default: 9900, catch-all: 10000)
PRECEDENCE = 1000
#: leader election is not squeezed: it keeps the priority level it had (Kubernetes' own controllers
#: have theirs apart from their work, the built-in leader-election level, for the same reason)
LEASE_GROUP = "coordination.k8s.io"
#: the least Retry-After kube-apiserver's priority and fairness sends (seconds)
MIN_RETRY_AFTER = 1.0
#: audit timestamps are microseconds; the server stamps a request a little after the client sent it
CLOCK_SLACK = 0.05
CONVERGE_WITHIN = codec.MAX_RETRY_AFTER_SECONDS + 30.0
CONVERGE_TIMEOUT = 180.0
#: the samples of the operator's /metrics during the squeeze (a measurement, not a synchronisation)
SAMPLE_EVERY = 0.5


def _squeezed_groups() -> list[str]:
    """Every API group the operator's generated RBAC grants, but the Lease's (leader election)."""
    return sorted({r.group for r in deploy_rbac.declared_rules()} - {LEASE_GROUP})


def _squeeze(ns: str, service_account: str, name: str) -> list[dict[str, Any]]:
    """The PriorityLevelConfiguration and the FlowSchema sending every request of the
    ServiceAccount to it (but its Lease's), in apply order."""
    level = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name},
        "spec": {
            "type": "Limited",
            "limited": {
                # no seats of its own (the API server then runs one request at a time, whatever its
                # width), none lent, none borrowed: the level cannot grow while the server is idle
                "nominalConcurrencyShares": 0,
                "lendablePercent": 0,
                "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"},
            },
        },
    }
    schema = {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": name},
        "spec": {
            "priorityLevelConfiguration": {"name": name},
            "matchingPrecedence": PRECEDENCE,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "serviceAccount": {"name": service_account, "namespace": ns},
                        }
                    ],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": _squeezed_groups(),
                            "resources": ["*"],
                            "clusterScope": True,
                            "namespaces": ["*"],
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }
    return [level, schema]


def _sum(text: str, family: str, **labels: str) -> float:
    """The sum of the samples of ``family`` whose labels include ``labels``, in a Prometheus text
    exposition (only the lines of that family are parsed: the API server's /metrics are megabytes)."""
    mine = "\n".join(line for line in text.splitlines() if line.startswith(family)) + "\n"
    return sum(
        s.value
        for fam in text_string_to_metric_families(mine)
        for s in fam.samples
        if s.name == family and all(s.labels.get(k) == v for k, v in labels.items())
    )


@dataclasses.dataclass(frozen=True)
class Figures:
    """The operator's counters at one moment, and the API server's for the squeeze's level."""

    at: float  # time.monotonic()
    requests: float  # every request the operator made
    throttled: float  # ... answered 429
    retries: float  # workqueue_retries_total of the controller
    client_retries: float  # rest_client_request_retries_total: answers sent again after Retry-After
    depth: float  # workqueue_depth of the controller
    errors: float  # controller_runtime_reconcile_errors_total
    rejected: float  # apiserver_flowcontrol_rejected_requests_total of the level
    dispatched: float  # apiserver_flowcontrol_dispatched_requests_total of the level


async def _figures(proc: operator.Process, admin: rclient.Client | None, level: str) -> Figures:
    """The figures now; without ``admin``, the API server's are not read (0)."""
    text = await proc.metrics()
    server = await admin.request_text("/metrics") if admin is not None else ""
    queue = {"name": controller.NAME}
    return Figures(
        at=time.monotonic(),
        requests=_sum(text, "rest_client_requests_total"),
        throttled=_sum(text, "rest_client_requests_total", code="429"),
        retries=_sum(text, "workqueue_retries_total", **queue),
        client_retries=_sum(text, "rest_client_request_retries_total"),
        depth=_sum(text, "workqueue_depth", **queue),
        errors=_sum(text, "controller_runtime_reconcile_errors_total", controller=controller.NAME),
        rejected=_sum(server, "apiserver_flowcontrol_rejected_requests_total", priority_level=level),
        dispatched=_sum(server, "apiserver_flowcontrol_dispatched_requests_total", priority_level=level),
    )


async def _not_dangling(admin: rclient.Client, name: str) -> bool:
    """The API server's priority and fairness has taken the FlowSchema in (its level exists)."""
    res = await admin.resource_for("flowcontrol.apiserver.k8s.io/v1", "FlowSchema")
    schema = await admin.get(res, name)
    conditions = (schema.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Dangling" and c.get("status") == "False" for c in conditions)


def _time(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@dataclasses.dataclass
class Retried:
    """From the audit log: the ServiceAccount's writes answered 429 and how soon each was tried again."""

    throttled: int = 0  # writes answered 429
    gaps: list[float] = dataclasses.field(default_factory=list)  # 429 -> next attempt, seconds
    too_soon: list[str] = dataclasses.field(default_factory=list)


def _retried(cluster_name: str, user: str) -> Retried:
    """Every write of ``user`` answered 429, paired with the next write of the same verb on the
    same object (its retry): the seconds between the 429 was sent and the retry arrived."""
    by_request: dict[tuple[str, ...], list[dict[str, Any]]] = collections.defaultdict(list)
    for path in cluster.audit_logs(cluster_name):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            ref = entry.get("objectRef") or {}
            if (entry.get("user") or {}).get("username") != user or not ref.get("name"):
                continue  # a create rejected before its body was read names no object
            key: tuple[str, ...] = (
                entry["verb"],
                str(ref.get("apiGroup", "")),
                ref["resource"],
                str(ref.get("subresource", "")),
                str(ref.get("namespace", "")),
                ref["name"],
            )
            by_request[key].append(entry)
    out = Retried()
    for key, entries in by_request.items():
        entries.sort(key=lambda e: _time(e["requestReceivedTimestamp"]))
        for this, after in itertools.pairwise(entries):
            if (this.get("responseStatus") or {}).get("code") != 429:
                continue
            gap = (_time(after["requestReceivedTimestamp"]) - _time(this["stageTimestamp"])).total_seconds()
            out.gaps.append(gap)
            if gap < MIN_RETRY_AFTER - CLOCK_SLACK:
                out.too_soon.append(f"{'/'.join(k for k in key if k)}: again {gap:.3f} s after a 429")
        out.throttled += sum(1 for e in entries if (e.get("responseStatus") or {}).get("code") == 429)
    return out


@dataclasses.dataclass
class Writer:
    """The admin writer's state: the model version of every InferenceService, the ones it created."""

    versions: dict[str, int]
    created: list[str] = dataclasses.field(default_factory=list)
    writes: int = 0

    def expected(self) -> dict[str, reliability.Expected]:
        return expected({n: model_uri(n, v) for n, v in self.versions.items()})


async def _write(c: rclient.Client, ns: str, writer: Writer, until: float) -> None:
    """Until ``until``: every ``ROUND`` seconds a rollout (a new modelUri for every InferenceService,
    ``WRITERS`` at a time), the first three with a share of the ``CREATED`` new InferenceServices."""
    rounds = min(3, max(1, int(SQUEEZE / ROUND)))
    gate = asyncio.Semaphore(WRITERS)

    async def change(name: str) -> None:
        async with gate:
            version = writer.versions[name] + 1
            await c.patch(ISVC, name, {"spec": {"modelUri": model_uri(name, version)}}, namespace=ns)
            writer.versions[name] = version
            writer.writes += 1

    async def create(name: str) -> None:
        async with gate:
            await c.create(ISVC, one_replica(name, modelUri=model_uri(name, 0)), ns)
            writer.versions[name] = 0
            writer.created.append(name)
            writer.writes += 1

    k = 0
    while time.monotonic() < until:
        started = time.monotonic()
        share = range(min(k, rounds) * CREATED // rounds, min(k + 1, rounds) * CREATED // rounds)
        new = [f"throttle-new-{i:02d}" for i in share]
        await asyncio.gather(*(change(n) for n in list(writer.versions)), *(create(n) for n in new))
        k += 1
        await asyncio.sleep(max(0.0, min(ROUND - (time.monotonic() - started), until - time.monotonic())))


async def test_throttling(scenario: Scenario, local_cluster_name: str) -> None:
    c, ns, tmp_path = scenario.client, scenario.namespace, scenario.logs
    reliability.audit_logs(local_cluster_name)
    rbac_objs = deploy_rbac.objects(namespace=ns, watch_namespaces=[ns], name=f"throttle-{ns}")
    cluster_scoped = [o for o in rbac_objs if "namespace" not in o["metadata"]]
    level = f"reliability-throttle-{ns}"
    squeeze = _squeeze(ns, deploy_rbac.NAME, level)
    user = f"system:serviceaccount:{ns}:{deploy_rbac.NAME}"
    names = [f"throttle-{i:02d}" for i in range(OBJECTS)]
    writer = Writer(dict.fromkeys(names, 0))
    samples: list[Figures] = []
    started = time.monotonic()
    try:
        await identity.apply_objects(c, rbac_objs)
        token = await identity.token_for(c, ns, deploy_rbac.NAME)
        kubeconfig = identity.token_kubeconfig(scenario.kubeconfig, token, tmp_path / "kubeconfig")
        for name in names:
            await c.create(ISVC, one_replica(name, modelUri=model_uri(name, 0)), ns)
        async with operator.replicas(
            kubeconfig,
            tmp_path,
            *operator.elected(ns, LEASE_ID, 15, 10, 2),
            "--workers", str(WORKERS),
        ) as group:  # fmt: skip
            proc = group.add()
            await wait.until(proc.ready, timeout=60, what="the operator ready (leading)")
            first = await reliability.converge(c, ns, writer.expected(), timeout=CONVERGE_TIMEOUT)
            assert first.audit.ok, f"before the squeeze: {first.audit.summary()}"
            await wait.until(lambda: _idle(proc), timeout=60, what="the operator's queue idle")
            setup = time.monotonic() - started
            async with reliability.status_history(c, ns) as history:
                await identity.apply_objects(c, squeeze)
                await wait.until(lambda: _not_dangling(c, level), timeout=30, what="the FlowSchema in effect")
                before = await _figures(proc, c, level)
                until = before.at + SQUEEZE
                writing = asyncio.create_task(_write(c, ns, writer, until))
                try:
                    while time.monotonic() < until:  # sample the squeeze (a measurement window)
                        samples.append(await _figures(proc, None, level))
                        assert proc.proc.poll() is None, f"the operator exited: {proc.proc.returncode}"
                        await asyncio.sleep(SAMPLE_EVERY)
                    await writing
                finally:
                    writing.cancel()
                during = await _figures(proc, c, level)
                samples.append(during)
                await identity.delete_objects(c, squeeze)
                lifted = time.monotonic()
                converged = await reliability.converge(
                    c, ns, writer.expected(), timeout=CONVERGE_TIMEOUT, since=lifted
                )
                after = await _figures(proc, c, level)
                assert proc.proc.poll() is None, f"the operator exited: {proc.proc.returncode}"
                assert await proc.ready(), "the operator no longer leads after the squeeze"
                regressions = history.regressions()
                status_events = history.events
    finally:
        await identity.delete_objects(c, squeeze)
        await identity.delete_objects(c, cluster_scoped)
    # every write of the squeeze has been answered (converged, the operator stopped), and the API
    # server writes an audit entry before it sends the answer (the log backend's blocking mode)
    retried = _retried(local_cluster_name, user)
    seconds = during.at - before.at
    throttled = during.throttled - before.throttled
    rejected = during.rejected - before.rejected
    requests = during.requests - before.requests
    streams = _streams()
    peak_depth = max(s.depth for s in samples)
    retries = during.retries - before.retries
    client_retries = during.client_retries - before.client_retries
    errors = during.errors - before.errors
    gaps = sorted(retried.gaps)
    print(
        f"\nthrottling: {OBJECTS} objects, {writer.writes} writes ({len(writer.created)} creates) in a "
        f"{seconds:.1f} s squeeze: operator {requests:.0f} requests ({requests / seconds:.1f}/s), "
        f"{throttled:.0f} answered 429 ({throttled / seconds:.1f}/s, bound {streams}/s); API server "
        f"rejected {rejected:.0f}, dispatched {during.dispatched - before.dispatched:.0f} of level {level}; "
        f"audit: {retried.throttled} writes answered 429, retried after {gaps[0] if gaps else 0:.2f}-"
        f"{gaps[-1] if gaps else 0:.2f} s; workqueue depth peak {peak_depth:.0f} (before "
        f"{before.depth:.0f}), client retries +{client_retries:.0f}, workqueue retries +{retries:.0f}, "
        f"reconcile errors +{errors:.0f}; "
        f"converged {converged.seconds:.1f} s after the lift ({after.requests - during.requests:.0f} "
        f"requests, {after.throttled - during.throttled:.0f} more 429s); {status_events} status events; "
        f"set-up (operator started, {OBJECTS} objects converged) {setup:.1f} s"
    )
    failures = _failures(proc)
    assert converged.audit.ok, converged.audit.summary()
    assert converged.seconds <= CONVERGE_WITHIN, f"converged {converged.seconds:.1f} s after the lift"
    assert throttled > 0, "the operator never got a 429 (so never retried one): no squeeze"
    assert rejected >= throttled, f"the API server rejected {rejected:.0f}, the operator saw {throttled:.0f}"
    assert retried.throttled > 0, "no write of the operator was answered 429 (audit log)"
    # the operator counted every 429 the API server logged (the log has its writes only)
    logged_429s = after.throttled - before.throttled
    assert retried.throttled <= logged_429s, (
        f"the audit log has {retried.throttled} writes answered 429, the operator counted "
        f"{logged_429s:.0f} 429s"
    )
    assert not retried.too_soon, f"tried again before Retry-After: {retried.too_soon[:10]}"
    assert throttled / seconds <= streams, f"{throttled / seconds:.1f} 429s per second (bound {streams})"
    assert peak_depth > before.depth, f"workqueue depth never rose ({before.depth:.0f} before the squeeze)"
    assert retries >= errors, f"{errors:.0f} failed reconciles, {retries:.0f} re-queued"
    # every 429 but the last of a request's eleven is sent again after its Retry-After
    assert 0 < client_retries <= throttled, f"client retries +{client_retries:.0f} for {throttled:.0f} 429s"
    assert not [f for f in failures if "429 TooManyRequests" not in f], (
        f"failures besides 429s: {failures[:5]}"
    )
    assert not regressions, regressions
    scenario.report(
        "6. Throttling",
        1,
        f"{seconds:.0f} s APF squeeze (one request at a time, Reject) of the operator's "
        f"ServiceAccount during {writer.writes} writes; {throttled:.0f} 429s",
        converged,
        f"operator {requests / seconds:.1f} requests/s, {throttled / seconds:.1f} 429s/s in the "
        f"squeeze (bound {streams}/s); every 429'd write tried again >= {gaps[0] if gaps else 0:.1f} "
        f"s later ({len(gaps)} in the audit log, of {retried.throttled} writes answered 429); workqueue "
        f"depth peak {peak_depth:.0f}, client retries +{client_retries:.0f}, workqueue retries "
        f"+{retries:.0f}; lease not squeezed",
    )


def _failures(proc: operator.Process) -> list[str]:
    """The errors of the operator's failed reconciles, from its log."""
    return [str(x.get("extra_error")) for x in proc.lines() if x.get("msg") == "reconcile failed, will retry"]


def _streams() -> int:
    """Requests the operator can have in flight at once: each worker's reconcile applies the
    children of a phase together, one informer per kind watched, the Event writer, the elector."""
    informers = 1 + len(CHILDREN) + 2  # InferenceServices, the children, pods and CRDs
    return WORKERS * len(CHILDREN) + informers + 2


async def _idle(proc: operator.Process) -> bool:
    return await work(proc) == 0
