"""Scenario 4, leader failover: two ``mlops-platform run`` processes with leader election; the leader
is SIGKILLed or SIGTERMed while it works, the standby takes over within lease duration + 5 s, and
at no moment do two leaders write: proved from the API server's side, its audit log.

Each replica's requests carry its identity in their User-Agent (``mlops-platform/<version>
(<os>/<arch>) <hostname>_<pid>``, the leader-election identity), which kube-apiserver records in
every audit entry (the dev cluster logs every write of the operator's kinds, ``devcluster.cluster.
AUDIT_POLICY``): both replicas have the same user and field manager, so managedFields could not tell
them apart. From the audit log of the test's namespace, the operator processes' writes sorted by
the time the server received them form one block per leader, in the order the Lease changed hands
(a standby writes nothing before it leads, an old leader nothing after its successor's first write),
and each block was complete (the last write's response sent) before the next block's first write
arrived. After a SIGTERM the old leader's last write is the release of its Lease.

One failover: a writer changes the ``modelUri`` of the InferenceServices without pause, the leader
reconciles them (killed once it has finished some reconciles of the writer's changes), the Lease
watch (started before the replicas) gives the takeover time, the writer stops once the new leader
reconciles, :func:`reliability.converge` from the fault, and a new standby is started. Lease
timing: full: ``mlops-platform run``'s defaults (15 s / 10 s / 2 s); reduced: 4 s / 3 s / 1 s.
Run with ``-s`` for the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import itertools
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mlops_platform.devcluster import cluster
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import isvc, operator, reliability, wait
from mlops_platform.testing.scenario import Scenario, expected, model_uri, one_replica

ISVC = isvc.RESOURCE  # v1alpha1 objects: every write goes through the conversion webhook
OBJECTS = reliability.scale(10, 4)
#: failovers of each kind (SIGKILL, SIGTERM, alternating)
EACH = reliability.repetitions(5, 1)
LEASE_ID = "reliability-failover"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = (15, 10, 2) if reliability.full() else (4, 3, 1)
#: the acceptance bound of a takeover (the waits' own timeouts are longer)
TAKEOVER_BOUND = LEASE_DURATION + 5
CONVERGE_WITHIN = 60.0
TIMEOUT = 180.0
#: the writer's pause between two spec changes (load pacing, not synchronisation)
PACE = 0.1
#: reconciles of the writer's changes the leader finishes before the fault, and the new leader
#: before the writer stops
WORK_BEFORE, WORK_AFTER = 3, 1


@dataclasses.dataclass
class Group:
    replicas: operator.Replicas
    #: (monotonic time, holder) for every change of the Lease's holder ("" released), from a watch
    #: started before the first replica
    holders: list[tuple[float, str]]

    def by_identity(self, identity: str) -> operator.Process:
        return next(p for p in self.replicas.started if p.identity == identity)

    def holder(self) -> str:
        return self.holders[-1][1] if self.holders else ""


@contextlib.asynccontextmanager
async def _group(c: rclient.Client, kubeconfig: Path, ns: str, logs: Path) -> AsyncIterator[Group]:
    """No replica yet (``group.replicas.add()``), the Lease watched from now on; all stopped after."""
    holders: list[tuple[float, str]] = []
    recorder = asyncio.create_task(
        operator.record_lease_holders(
            c,
            ns,
            lambda _, holder: holders.append((time.monotonic(), holder)),
            field_selector=f"metadata.name={LEASE_ID}",
        )
    )
    flags = operator.elected(ns, LEASE_ID, LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD)
    try:
        async with operator.replicas(kubeconfig, logs, *flags) as replicas:
            yield Group(replicas, holders)
    finally:
        recorder.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await recorder


def _synced(proc: operator.Process) -> bool:
    """The replica has listed everything (a standby campaigns from then on)."""
    return any(line.get("msg") == "caches synced" for line in proc.lines())


async def _worked(proc: operator.Process, since: int, count: int) -> bool:
    return await proc.reconciles() - since >= count


@dataclasses.dataclass
class Writer:
    """Changes the modelUri of the objects one after the other until stopped; the last URI of each."""

    last: dict[str, str]
    stop: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    writes: int = 0

    async def run(self, c: rclient.Client, ns: str, tag: str) -> None:
        for i in itertools.count():
            if self.stop.is_set():
                return
            name = sorted(self.last)[i % len(self.last)]
            uri = model_uri(name, f"{tag}-{i}")
            await c.patch(ISVC, name, {"spec": {"modelUri": uri}}, namespace=ns)
            self.last[name] = uri
            self.writes += 1
            await asyncio.sleep(PACE)


@dataclasses.dataclass
class Failover:
    sig: signal.Signals
    old: str
    new: str
    takeover_s: float
    converge_s: float
    released: bool  # the Lease showed no holder between the two (the old leader released it)


async def _fail_over(
    c: rclient.Client, ns: str, group: Group, sig: signal.Signals, n: int, last: dict[str, str]
) -> Failover:
    leader = group.by_identity(group.holder())
    standbys = [p for p in group.replicas.started if p.proc.poll() is None and p is not leader]
    assert standbys, "no standby runs: " + "; ".join(
        f"{p.identity}: {p.tail(3)}" for p in group.replicas.started
    )
    standby = standbys[0]
    await wait.until(lambda: _synced(standby), timeout=TIMEOUT, what=f"standby {standby.identity} synced")
    writer = Writer(last)
    writing = asyncio.create_task(writer.run(c, ns, f"f{n}"))
    base = await leader.reconciles()
    await wait.until(
        lambda: _worked(leader, base, WORK_BEFORE), timeout=TIMEOUT, what=f"leader {leader.identity} at work"
    )
    seen = len(group.holders)
    leader.kill(sig)
    faulted = time.monotonic()
    took = await wait.until(
        lambda: next((t for t, h in group.holders[seen:] if h == standby.identity), None),
        timeout=TIMEOUT,
        interval=0.05,
        what=f"{standby.identity} holding the Lease after the {sig.name}",
    )
    code = await asyncio.to_thread(leader.proc.wait, TIMEOUT)
    base = await standby.reconciles()
    await wait.until(
        lambda: _worked(standby, base, WORK_AFTER),
        timeout=TIMEOUT,
        what=f"new leader {standby.identity} at work",
    )
    writer.stop.set()
    await writing
    converged = await reliability.converge(c, ns, expected(last), timeout=TIMEOUT, since=faulted)
    assert converged.audit.ok, f"after the {sig.name} of {leader.identity}: {converged.audit.summary()}"
    assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL), f"{sig.name}: exit code {code}"
    released = "" in [h for _, h in group.holders[seen:]]
    group.replicas.add()  # the next standby
    return Failover(sig, leader.identity, standby.identity, took - faulted, converged.seconds, released)


def _time(stamp: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(stamp)


@dataclasses.dataclass
class Block:
    """Consecutive writes of one replica as the API server received them."""

    identity: str
    first_received: datetime.datetime
    last_completed: datetime.datetime
    writes: int
    last: dict[str, Any]  # the audit entry of its last write


def _blocks(cluster_name: str, ns: str, identities: set[str]) -> list[Block]:
    """The operator processes' writes in ``ns`` that the API server did not refuse (4xx), from the
    audit log, in the order received. A refused write changed nothing: two replicas racing to
    create the Lease at start both send a create, and the loser's (409) may be received first."""
    entries = []
    for path in cluster.audit_logs(cluster_name):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            agent = str(entry.get("userAgent", ""))
            # a 4xx refused the write; a 5xx (a timeout) may still have applied it: kept
            applied = not 400 <= int((entry.get("responseStatus") or {}).get("code") or 0) < 500
            ours = agent.rsplit(" ", 1)[-1] in identities
            if entry.get("objectRef", {}).get("namespace") == ns and ours and applied:
                entries.append(entry)
    entries.sort(key=lambda e: _time(e["requestReceivedTimestamp"]))
    blocks: list[Block] = []
    for entry in entries:
        identity = entry["userAgent"].rsplit(" ", 1)[-1]
        received, completed = _time(entry["requestReceivedTimestamp"]), _time(entry["stageTimestamp"])
        if blocks and blocks[-1].identity == identity:
            block = blocks[-1]
            block.last_completed = max(block.last_completed, completed)
            block.writes += 1
            block.last = entry
        else:
            blocks.append(Block(identity, received, completed, 1, entry))
    return blocks


async def test_leader_failover(scenario: Scenario, local_cluster_name: str) -> None:
    c, ns = scenario.client, scenario.namespace
    reliability.audit_logs(local_cluster_name)
    last = {name: model_uri(name, "initial") for name in (f"failover-{i}" for i in range(OBJECTS))}
    for name, uri in last.items():
        await c.create(ISVC, one_replica(name, modelUri=uri), ns)
    faults = [signal.SIGKILL, signal.SIGTERM] * EACH
    done: list[Failover] = []
    async with _group(c, scenario.kubeconfig, ns, scenario.logs) as group:
        group.replicas.add(), group.replicas.add()
        await wait.until(group.holder, timeout=TIMEOUT, what="a leader")
        first = group.holder()
        converged = await reliability.converge(c, ns, expected(last), timeout=TIMEOUT)
        assert converged.audit.ok, f"before the first failover: {converged.audit.summary()}"
        for n, sig in enumerate(faults):
            failover = await _fail_over(c, ns, group, sig, n, last)
            print(f"\nfailover {n + 1}: {failover}")
            done.append(failover)
        leaders = [first] + [f.new for f in done]
        identities = {p.identity for p in group.replicas.started}

        def logged() -> list[Block] | None:  # the audit log is written as requests complete
            found = _blocks(local_cluster_name, ns, identities)
            return found if any(b.identity == leaders[-1] for b in found) else None

        blocks = await wait.until(
            logged,
            timeout=TIMEOUT,
            what="the last leader's writes in the audit log",
        )
        holders = [h for _, h in group.holders]
    print(
        "writers in the audit log: "
        + ", ".join(
            f"{b.identity} {b.writes} writes {b.first_received:%T.%f}..{b.last_completed:%T.%f}"
            for b in blocks
        )
    )
    # one block per leader, in the order the Lease changed hands: nobody else wrote, nobody twice
    assert [b.identity for b in blocks] == leaders, (
        f"writers (audit log) {[b.identity for b in blocks]}, leaders (Lease) {leaders}; holders {holders}"
    )
    gaps = []
    for (before, after), failover in zip(itertools.pairwise(blocks), done, strict=True):
        gap = (after.first_received - before.last_completed).total_seconds()
        gaps.append(gap)
        assert gap > 0, f"{after.identity} wrote {-gap:.3f} s before {before.identity}'s last write completed"
        if failover.sig == signal.SIGTERM:
            ref = before.last["objectRef"]
            assert (ref["resource"], ref["name"], before.last["verb"]) == ("leases", LEASE_ID, "update"), (
                f"{before.identity}'s last write after its SIGTERM: {before.last['verb']} {ref}"
            )
            assert failover.released, f"{failover}: the Lease never showed no holder"
    for failover in done:
        assert failover.takeover_s <= TAKEOVER_BOUND, (
            f"{failover.sig.name}: {failover.new} took over {failover.takeover_s:.1f} s after it "
            f"(contract: lease {LEASE_DURATION} s + 5 s)"
        )
        assert failover.converge_s <= CONVERGE_WITHIN, f"{failover}: converged in {failover.converge_s:.1f} s"
    takeover = {
        sig: max(f.takeover_s for f in done if f.sig == sig) for sig in (signal.SIGKILL, signal.SIGTERM)
    }
    scenario.report(
        "4. Leader failover",
        len(done),
        f"{EACH} SIGKILLs and {EACH} SIGTERMs of the leader while it reconciled",
        converged,
        f"takeover max {takeover[signal.SIGKILL]:.1f} s after SIGKILL, "
        f"{takeover[signal.SIGTERM]:.1f} s after SIGTERM (lease {LEASE_DURATION} s, bound "
        f"{TAKEOVER_BOUND} s); audit log: {sum(b.writes for b in blocks)} operator writes, one leader "
        f"at a time, min gap {min(gaps):.2f} s",
        max_converge_s=max(f.converge_s for f in done),
    )
