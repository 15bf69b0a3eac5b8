"""Sharding: the stable hash, fair share and rendezvous arithmetic, the view of the group on a fake
clock, the controller's ownership filter, and a static-mode coordinator on the fake client.

Synchronisation is by asyncio events and FakeClock.step; ``asyncio.sleep(0)`` only lets runnable
tasks run (a scheduler yield, never a wait for time to pass).
"""

from __future__ import annotations

import asyncio
import collections
import copy
import dataclasses
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from mlops_platform import cli
from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.clock import FakeClock
from mlops_platform.runtime.control import builder as rbuilder
from mlops_platform.runtime.control import controller as rcontroller
from mlops_platform.runtime.control import partitioning, shardgroup, sharding
from mlops_platform.runtime.control.reconcile import Request, Result
from mlops_platform.runtime.objects import Obj
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.transport.resources import LEASE
from mlops_platform.testing import fakes
from mlops_platform.testing.queues import drain

JSON = dict[str, Any]
PRIMARY = resources.CONFIG_MAP
CHILD = resources.SECRET


async def _yield_to_tasks(times: int = 5) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


# -- the arithmetic ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "bucket", "p3", "p5", "p16"),
    [
        (Request("default", "web"), 100, 1, 0, 4),
        (Request("default", "web-2"), 223, 1, 3, 15),
        (Request("team-a", "bert"), 149, 2, 4, 5),
        (Request("team-b", "resnet50"), 109, 1, 4, 13),
        (Request(None, "cluster-wide"), 82, 1, 2, 2),
        (Request("ns", "a"), 44, 2, 4, 12),
        (Request("ns", "b"), 178, 1, 3, 2),
        (Request("ns", "c"), 146, 2, 1, 2),
    ],
    ids=str,
)
def test_the_partition_of_a_request_is_a_fixed_function_of_namespace_and_name(
    request_: Request, bucket: int, p3: int, p5: int, p16: int
) -> None:
    # pinned: a change here moves objects between partitions of replicas of different releases,
    # and changes the bucket label of every child
    assert partitioning.bucket_of(request_) == bucket
    assert [partitioning.partition_of(request_, p) for p in (3, 5, 16)] == [p3, p5, p16]
    assert partitioning.partition_of(request_, 1) == 0


def test_a_partition_selector_selects_exactly_the_buckets_of_the_partitions() -> None:
    sel = partitioning.partition_selector({1}, 3)
    key, _, values = sel.partition(" in ")
    assert key == partitioning.BUCKET_LABEL
    buckets = {int(v) for v in values.strip("()").split(",")}
    assert buckets == {b for b in range(partitioning.BUCKETS) if b % 3 == 1}
    both = partitioning.partition_selector({0, 2}, 3).partition(" in ")[2]
    assert {int(v) for v in both.strip("()").split(",")} == {b for b in range(256) if b % 3 != 1}
    # no partition: a selector no child matches (a bucket label is always a number)
    assert partitioning.partition_selector((), 3) == f"{partitioning.BUCKET_LABEL} in (none)"
    with pytest.raises(ValueError, match=r"partitions must be in \[1, 256\]"):
        shardgroup.ShardConfig("ops", "grp", "me", 257)


def test_partitions_spread_objects_evenly() -> None:
    counts = collections.Counter(
        partitioning.partition_of(Request("ns", f"isvc-{i}"), 3) for i in range(3000)
    )
    assert sorted(counts) == [0, 1, 2]
    assert all(900 <= n <= 1100 for n in counts.values()), counts


@pytest.mark.parametrize(
    ("partitions", "members", "share"),
    [(3, 1, 3), (3, 2, 2), (3, 3, 1), (3, 4, 1), (5, 3, 2), (16, 3, 6), (1, 5, 1), (4, 0, 4)],
)
def test_fair_share_is_the_ceiling_of_partitions_over_members(
    partitions: int, members: int, share: int
) -> None:
    assert partitioning.fair_share(partitions, members) == share


def test_rendezvous_order_is_a_fixed_permutation_per_identity() -> None:
    assert partitioning.preference("alpha", 5) == [2, 3, 4, 0, 1]
    assert partitioning.preference("beta", 5) == [0, 4, 3, 2, 1]
    assert partitioning.rank("alpha", 0) == 9582805439083443850
    firsts = collections.Counter(partitioning.preference(f"pod-{i}_1", 3)[0] for i in range(300))
    assert all(n >= 60 for n in firsts.values()), firsts  # identities spread over first choices


# -- the plan ---------------------------------------------------------------------------------------

MEMBERS = ("pod-a_1", "pod-b_1", "pod-c_1")


def test_three_members_and_three_free_partitions_take_one_each() -> None:
    plans = {m: partitioning.plan(m, 3, MEMBERS, {}) for m in MEMBERS}
    assert all(p.share == 1 and p.members == 3 and len(p.acquire) == 1 for p in plans.values())
    taken = [k for p in plans.values() for k in p.acquire]
    assert sorted(taken) == [0, 1, 2]  # disjoint: the members agree without talking


def test_a_dead_members_partition_goes_to_exactly_one_survivor() -> None:
    a, b, _ = MEMBERS
    holders = {0: a, 1: b}  # partition 2's holder is gone, and so is its member Lease
    plans = [
        partitioning.plan(m, 3, (a, b), holders, leading=[k for k, h in holders.items() if h == m])
        for m in (a, b)
    ]
    assert [p.share for p in plans] == [2, 2]
    assert sorted(k for p in plans for k in p.acquire) == [2]
    assert all(p.release == () for p in plans)


def test_a_new_member_makes_the_one_above_its_share_release_its_worst_ranked_partition() -> None:
    a, b, c = MEMBERS
    holders = {0: a, 2: a, 1: b}
    plan_a = partitioning.plan(a, 3, MEMBERS, holders, leading=[0, 2])
    assert plan_a.share == 1
    worst = min((0, 2), key=lambda k: partitioning.rank(a, k))
    assert plan_a.release == (worst,)
    assert plan_a.acquire == frozenset()
    assert partitioning.plan(c, 3, MEMBERS, holders).acquire == frozenset()  # nothing is free yet
    del holders[worst]  # a released it
    assert partitioning.plan(c, 3, MEMBERS, holders).acquire == {worst}
    assert partitioning.plan(a, 3, MEMBERS, holders, leading=[2 if worst == 0 else 0]).acquire == frozenset()
    assert partitioning.plan(b, 3, MEMBERS, holders, leading=[1]).acquire == frozenset()


def test_a_restarted_identity_takes_its_own_lease_back_and_foreign_holders_count() -> None:
    a, b, _ = MEMBERS
    # a's Lease from before a restart (same identity, no elector leads it yet)
    assert 1 in partitioning.plan(a, 3, (a, b), {1: a, 0: b}).acquire
    # a holder that is no live member (a static replica) still holds: its partition is not free
    p = partitioning.plan(a, 3, (a, b), {0: "static-replica"})
    assert 0 not in p.acquire


@pytest.mark.parametrize(("partitions", "members"), list(itertools.product([1, 2, 3, 5, 7], [1, 2, 3, 4])))
def test_membership_changes_converge_without_two_holders(partitions: int, members: int) -> None:
    """A model of the group: Leases are exclusive (one holder), every member acts on its plan in
    turn, members join and die; at every step each partition has at most one holder, and the
    group converges to every partition held by a member within its share."""
    holders: dict[int, str] = {}
    alive = [f"m{i}" for i in range(members)]

    def settle() -> None:
        for _ in range(4 * partitions + 4):
            changed = False
            for m in alive:
                mine = [k for k, h in holders.items() if h == m]
                p = partitioning.plan(m, partitions, alive, holders, leading=mine)
                for k in p.release:
                    del holders[k]
                    changed = True
                for k in sorted(p.acquire):
                    if k not in holders:  # the Lease protocol: only a free Lease can be taken
                        holders[k] = m
                        changed = True
            if not changed:
                break
        share = partitioning.fair_share(partitions, len(alive))
        assert sorted(holders) == list(range(partitions)), holders
        counts = collections.Counter(holders.values())
        assert max(counts.values()) <= share, counts
        assert set(counts) <= set(alive)

    settle()
    alive.append("joiner")  # a member joins
    settle()
    dead = alive.pop(0)  # a member dies: its Leases expire
    holders = {k: h for k, h in holders.items() if h != dead}
    settle()


# -- the view of the group ----------------------------------------------------------------------------

CONFIG = shardgroup.ShardConfig(
    "ops", "grp", "pod-a_1", 3, lease_duration=6, renew_deadline=4, retry_period=1
)


def _lease(name: str, holder: str, renew: str, role: str, shards: int = 3, duration: int = 6) -> Obj:
    return {
        "metadata": {
            "name": name,
            "namespace": "ops",
            "labels": {shardgroup.GROUP_LABEL: "grp", shardgroup.ROLE_LABEL: role},
            "annotations": {shardgroup.SHARDS_ANNOTATION: str(shards)},
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": renew},
    }


def test_the_view_judges_expiry_by_the_local_clock_when_the_record_last_changed() -> None:
    clock = FakeClock()
    view = shardgroup.LeaseView(CONFIG, clock)
    member = _lease("grp-member-pod-b-1", "pod-b_1", "t0", "member")
    view.on_add(member)
    view.on_add(_lease("grp-shard-1", "pod-b_1", "t0", "partition"))
    view.on_add(_lease("grp-shard-2", "", "t0", "partition"))  # released
    view.on_add(_lease("unrelated", "x", "t0", "partition"))  # not one of our partitions
    assert view.holders() == {1: "pod-b_1"}  # held until it expires by our clock
    assert view.members() == {}  # first seen: it may be long dead, it counts once seen renewing
    clock.step(0.5)
    renewed = _lease("grp-member-pod-b-1", "pod-b_1", "t0.5", "member")
    view.on_update(member, renewed)
    assert view.members() == {"pod-b_1": 3}
    clock.step(4.5)
    view.on_update(renewed, renewed)  # a resync re-delivers the same record: no renewal
    clock.step(1.0)
    assert view.holders() == {}  # partition 1 last changed at 0: expired at 6
    clock.step(0.4)
    assert view.members() == {"pod-b_1": 3}  # last changed at 0.5: valid until 6.5
    clock.step(0.1)
    assert view.members() == {}
    view.on_update(renewed, _lease("grp-member-pod-b-1", "pod-b_1", "t7", "member"))
    assert view.members() == {"pod-b_1": 3}  # it came back
    view.on_delete(renewed)
    assert view.members() == {}


def test_config_validates_names_and_timing() -> None:
    assert CONFIG.lease_name(2) == "grp-shard-2"
    assert CONFIG.member_name.startswith("grp-member-pod-a-1-")  # "_" is no DNS character: hashed
    assert shardgroup.ShardConfig("ops", "grp", "pod-a", 3).member_name == "grp-member-pod-a"
    with pytest.raises(ValueError, match=r"shard_id must be in \[0, 3\)"):
        shardgroup.ShardConfig("ops", "grp", "me", 3, shard_id=3)
    with pytest.raises(ValueError, match="lease_duration must be greater than renew_deadline"):
        shardgroup.ShardConfig("ops", "grp", "me", 3, lease_duration=5, renew_deadline=6)
    with pytest.raises(ValueError, match="valid label value"):
        shardgroup.ShardConfig("ops", "bad/group", "me", 3)


def test_a_member_announcing_another_partition_count_makes_the_coordinator_hold_nothing() -> None:
    coordinator = sharding.ShardCoordinator(fakes.FakeClient(), CONFIG, registry=CollectorRegistry())
    first = _lease("grp-member-pod-b-1", "pod-b_1", "t0", "member", shards=5)
    coordinator.view.on_add(first)
    coordinator.view.on_update(first, _lease("grp-member-pod-b-1", "pod-b_1", "t1", "member", shards=5))
    p = coordinator.plan()
    assert (p.share, p.acquire) == (0, frozenset())


def test_the_coordinator_refuses_acquisitions_before_joining_and_when_stopping() -> None:
    coordinator = sharding.ShardCoordinator(fakes.FakeClient(), CONFIG, registry=CollectorRegistry())
    assert coordinator.refusal(0) == "not joined yet"
    coordinator.stop()
    assert coordinator.refusal(0) == "stopping"


# -- the controller's ownership filter -------------------------------------------------------------------


class Recording:
    def __init__(self) -> None:
        self.seen: list[Request] = []
        self.called = asyncio.Event()
        self.release = asyncio.Event()
        self.release.set()

    async def reconcile(self, request: Request) -> Result:
        self.seen.append(request)
        self.called.set()
        await self.release.wait()
        return Result()


def _cm(name: str, owner: str | None = None, kind: str = "ConfigMap") -> Obj:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
            }
        ]
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


def _controller(reconciler: Recording, primaries: list[str]) -> tuple[rcontroller.Controller, rcache.Cache]:
    cache = rcache.Cache(fakes.FakeClient())
    fakes.seed(cache, PRIMARY, [_cm(n) for n in primaries])
    fakes.seed(cache, CHILD, [])
    ctrl = rbuilder.Builder("shardy", cache).for_(PRIMARY).owns(CHILD).build(reconciler)
    return ctrl, cache


def _only(*names: str) -> Callable[[Request], bool]:
    return lambda req: req.name in names


async def test_events_of_unowned_requests_are_not_enqueued() -> None:
    ctrl, cache = _controller(Recording(), ["mine", "theirs"])
    await drain(ctrl)  # the initial adds of the seeded store, before the filter was set
    ctrl.ownership = _only("mine")
    for handler in cache.informer_for(PRIMARY).handlers:
        handler.on_add(_cm("mine"))
        handler.on_add(_cm("theirs"))
    for handler in cache.informer_for(CHILD).handlers:
        handler.on_add(_cm("mine-child", owner="mine", kind="Secret"))
        handler.on_add(_cm("theirs-child", owner="theirs", kind="Secret"))  # maps to its owner first
    assert await drain(ctrl) == [Request("ns", "mine")]


async def test_enqueue_all_with_a_partition_enqueues_its_cached_objects_only() -> None:
    names = [f"isvc-{i}" for i in range(12)]
    ctrl, _ = _controller(Recording(), names)
    await drain(ctrl)
    in_1 = [Request("ns", n) for n in names if partitioning.partition_of(Request("ns", n), 3) == 1]
    assert in_1 and len(in_1) < len(names)
    ctrl.ownership = lambda req: partitioning.partition_of(req, 3) in (0, 1)
    ctrl.enqueue_all(lambda req: partitioning.partition_of(req, 3) == 1)
    assert await drain(ctrl) == sorted(in_1)


async def test_a_dequeued_request_whose_partition_moved_is_skipped_not_reconciled() -> None:
    reconciler = Recording()
    ctrl, _ = _controller(reconciler, ["moved", "kept"])
    await drain(ctrl)
    owned = {"moved", "kept"}
    ctrl.ownership = lambda req: req.name in owned
    ctrl.queue.add(Request("ns", "moved"))
    ctrl.queue.add(Request("ns", "kept"))  # FIFO: dequeued after "moved"
    owned.discard("moved")  # the partition went to another replica while queued
    ctrl.start()
    try:
        await asyncio.wait_for(reconciler.called.wait(), 5)  # timeout: a guard, not a sync
        assert reconciler.seen == [Request("ns", "kept")]
        assert len(ctrl.queue) == 0
    finally:
        await ctrl.stop(timeout=1)


async def test_wait_idle_waits_for_in_flight_reconciles_of_the_partition_only() -> None:
    reconciler = Recording()
    reconciler.release.clear()
    ctrl, _ = _controller(reconciler, ["busy"])
    await drain(ctrl)
    ctrl.queue.add(Request("ns", "busy"))
    ctrl.start()
    try:
        await asyncio.wait_for(reconciler.called.wait(), 5)
        await asyncio.wait_for(ctrl.wait_idle(_only("other")), 5)  # nothing of it in flight
        waiting = asyncio.create_task(ctrl.wait_idle(_only("busy")))
        await _yield_to_tasks()
        assert not waiting.done()
        reconciler.release.set()
        await asyncio.wait_for(waiting, 5)
    finally:
        await ctrl.stop(timeout=1)


# -- a coordinator in static mode on the fake client -------------------------------------------------------


class FakeTarget:
    """Records what the coordinator asks of a controller, in one timeline with the client's calls."""

    def __init__(self, client: fakes.FakeClient, objects: list[Request]) -> None:
        self.client, self.objects = client, objects
        self.timeline: list[tuple[str, Any]] = []
        self.enqueued: list[Request] = []
        self.gained = asyncio.Event()

    def enqueue_all(self, where: Callable[[Request], bool] | None = None) -> None:
        self.enqueued += [r for r in self.objects if where is None or where(r)]
        self.timeline.append(("enqueue_all", len(self.client.calls)))
        self.gained.set()

    async def wait_idle(self, where: Callable[[Request], bool]) -> None:
        self.timeline.append(("wait_idle", len(self.client.calls)))


async def test_a_static_shard_holds_its_partition_enqueues_it_and_drains_before_releasing() -> None:
    client = fakes.FakeClient()
    config = shardgroup.ShardConfig(
        "ops", "grp", "pod-a_1", 3, shard_id=1, lease_duration=6, renew_deadline=4, retry_period=1
    )
    requests = [Request("ns", f"isvc-{i}") for i in range(12)]
    target = FakeTarget(client, requests)
    registry = CollectorRegistry()
    coordinator = sharding.ShardCoordinator(
        client, config, [target], registry=registry, clock=FakeClock(), rand=lambda: 0.0
    )
    task = asyncio.create_task(coordinator.run())
    try:
        await asyncio.wait_for(target.gained.wait(), 5)
        assert coordinator.held == {1}
        assert target.enqueued == [r for r in requests if partitioning.partition_of(r, 3) == 1]
        assert all(coordinator.owns(r) == (partitioning.partition_of(r, 3) == 1) for r in requests)
        lease = client.stored(LEASE, "ops", "grp-shard-1")
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == "pod-a_1"
        assert lease["metadata"]["labels"] == {
            shardgroup.GROUP_LABEL: "grp",
            shardgroup.ROLE_LABEL: "partition",
        }
        assert registry.get_sample_value("mlops_platform_shard_partitions_held") == 1
        assert registry.get_sample_value("mlops_platform_shard_partition_held", {"partition": "1"}) == 1
        assert registry.get_sample_value("mlops_platform_shard_partition_held", {"partition": "0"}) == 0
        assert client.stored(LEASE, "ops", "grp-shard-0") is None  # static: only its own partition
    finally:
        coordinator.stop()
        await asyncio.wait_for(task, 5)
    lease = client.stored(LEASE, "ops", "grp-shard-1")
    assert lease is not None and lease["spec"]["holderIdentity"] == ""  # released
    drained_at = dict(target.timeline)["wait_idle"]
    release = max(i for i, c in enumerate(client.calls) if c.verb == "replace")
    assert release >= drained_at  # drained first, released after
    assert coordinator.held == frozenset()
    assert registry.get_sample_value("mlops_platform_shard_partitions_held") == 0


async def test_a_partition_whose_renewals_fail_is_given_up_by_the_renew_deadline() -> None:
    client = fakes.FakeClient()
    clock = FakeClock()
    config = shardgroup.ShardConfig(
        "ops", "grp", "pod-a_1", 2, shard_id=0, lease_duration=6, renew_deadline=4, retry_period=1
    )
    target = FakeTarget(client, [])
    coordinator = sharding.ShardCoordinator(
        client, config, [target], registry=CollectorRegistry(), clock=clock, rand=lambda: 0.0
    )
    task = asyncio.create_task(coordinator.run())
    try:
        await asyncio.wait_for(target.gained.wait(), 5)
        client.fail("replace", "leases", status=500, message="etcd is away")
        client.fail("get", "leases", status=500, message="etcd is away")
        stepped = 0.0
        while coordinator.held and stepped < 10:  # fake time: each step lets the elector retry
            clock.step(0.25)
            stepped += 0.25
            await _yield_to_tasks(20)
        assert coordinator.held == frozenset()
        # given up after the renew deadline (4 s), counted from the last renewal (at 0)
        assert 4 <= stepped <= 1 + 4 + 1, stepped
        assert [name for name, _ in target.timeline] == ["enqueue_all", "wait_idle"]
    finally:
        coordinator.stop()
        clock.step(10)
        await asyncio.wait_for(task, 5)


# -- the command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shards", "3", "--shard-id", "3"], "--shard-id must be in [0, --shards) = [0, 3), got 3"),
        (["--shards", "3", "--shard-id", "-1"], "--shard-id must be in [0, --shards) = [0, 3), got -1"),
        (["--shard-id", "0"], "--shard-id needs --shards > 1"),
        (["--shards", "0"], "Invalid value for '--shards'"),
        (
            ["--lease-duration", "5", "--renew-deadline", "6"],
            "--lease-duration must be greater than --renew-deadline",
        ),
        (
            ["--renew-deadline", "2", "--retry-period", "2"],
            "--renew-deadline must be greater than 1.2 * --retry-period",
        ),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_run_rejects_bad_shard_and_lease_flags_naming_the_flag(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli.main, ["run", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


# -- a dynamic group on a fake API server and a fake clock ------------------------------------------------


class LeaseWorld:
    """What the API server keeps of Leases: objects, resourceVersions (optimistic concurrency on
    every update, as the real server), and watchers that see every change."""

    def __init__(self) -> None:
        self.objects: dict[str, JSON] = {}
        self.rv = 0
        self.watchers: list[asyncio.Queue[JSON]] = []

    def put(self, kind: str, obj: JSON) -> JSON:
        self.rv += 1
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if kind == "DELETED":
            self.objects.pop(obj["metadata"]["name"], None)
        else:
            self.objects[obj["metadata"]["name"]] = obj
        for q in self.watchers:
            q.put_nowait({"type": kind, "object": copy.deepcopy(obj)})
        return copy.deepcopy(obj)


class WorldClient(fakes.FakeClient):
    """One replica's connection to the :class:`LeaseWorld`; ``alive = False`` cuts it off (every
    request fails as a connection error would), like a crash or a network partition."""

    def __init__(self, world: LeaseWorld) -> None:
        super().__init__()
        self.world, self.alive = world, True
        self.gets: list[str] = []  # names read with a GET
        self.replaced: list[str] = []  # names updated

    def _check(self) -> None:
        if not self.alive:
            raise ConnectionRefusedError("cut off")

    async def get(self, res: Any, name: str, namespace: str | None = None) -> JSON:
        self._check()
        self.gets.append(name)
        if name not in self.world.objects:
            raise fakes.api_error(404)
        return copy.deepcopy(self.world.objects[name])

    async def list(self, res: Any, namespace: str | None = None, **kw: Any) -> JSON:
        self._check()
        items = [copy.deepcopy(o) for o in self.world.objects.values()]
        return {"items": items, "metadata": {"resourceVersion": str(self.world.rv)}}

    async def create(self, res: Any, obj: JSON, namespace: str | None = None) -> JSON:
        self._check()
        if obj["metadata"]["name"] in self.world.objects:
            raise fakes.api_error(409, reason="AlreadyExists")
        return self.world.put("ADDED", obj)

    async def replace(self, res: Any, obj: JSON, *, subresource: str | None = None) -> JSON:
        self._check()
        self.replaced.append(obj["metadata"]["name"])
        stored = self.world.objects.get(obj["metadata"]["name"])
        if stored is None:
            raise fakes.api_error(404)
        if stored["metadata"]["resourceVersion"] != obj["metadata"].get("resourceVersion"):
            raise fakes.api_error(409, "the object has been modified")
        return self.world.put("MODIFIED", obj)

    async def delete(self, res: Any, name: str, namespace: str | None = None, **kw: Any) -> JSON:
        self._check()
        if name not in self.world.objects:
            raise fakes.api_error(404)
        self.world.put("DELETED", self.world.objects[name])
        return {"status": "Success"}

    async def watch(self, res: Any, namespace: str | None = None, **kw: Any) -> AsyncIterator[JSON]:
        self._check()
        q: asyncio.Queue[JSON] = asyncio.Queue()
        self.world.watchers.append(q)
        try:
            while True:
                yield await q.get()
        finally:
            self.world.watchers.remove(q)


@dataclasses.dataclass
class Member:
    client: WorldClient
    coordinator: sharding.ShardCoordinator
    task: asyncio.Task[None]


async def test_a_dynamic_group_splits_fails_over_and_rebalances_never_with_two_holders() -> None:
    """Three coordinators on one fake API server, in fake time: one partition each; one is cut off
    (it gives its partition up by the renew deadline, another takes it after the lease expired);
    a fourth joins and the partitions rebalance. At every step of the clock each partition is held
    by at most one coordinator."""
    world, clock = LeaseWorld(), FakeClock()
    members: dict[str, Member] = {}
    overlaps: list[tuple[float, int, list[str]]] = []

    def start(identity: str) -> Member:
        client = WorldClient(world)
        config = shardgroup.ShardConfig(
            "ops", "grp", identity, 3, lease_duration=6, renew_deadline=4, retry_period=1
        )
        c = sharding.ShardCoordinator(
            client, config, registry=CollectorRegistry(), clock=clock, rand=lambda: 0.5
        )
        members[identity] = Member(client, c, asyncio.create_task(c.run()))
        return members[identity]

    async def step_until(probe: Callable[[], bool], limit: float) -> float:
        """Step the fake clock by 0.1 s (letting every task run) until ``probe()``; the fake time taken."""
        began = clock.now()
        while not probe():
            assert clock.now() - began < limit, f"not within {limit}s of fake time"
            clock.step(0.1)
            await _yield_to_tasks(30)
            for k in range(3):
                holding = [i for i, m in members.items() if m.client.alive and k in m.coordinator.held]
                cut = [i for i, m in members.items() if not m.client.alive and k in m.coordinator.held]
                if len(holding) + len(cut) > 1:
                    overlaps.append((clock.now(), k, holding + cut))
        return clock.now() - began

    def one_each(*identities: str) -> bool:
        held = [members[i].coordinator.held for i in identities]
        return all(len(h) == 1 for h in held) and set().union(*held) == {0, 1, 2}

    for identity in ("pod-a", "pod-b", "pod-c"):
        start(identity)
    try:
        await step_until(lambda: one_each("pod-a", "pod-b", "pod-c"), 30)
        # at steady state the Leases others hold are observed from the group's watch, not read
        # with a GET per acquire interval, and member Leases are renewed every member retry period
        # (2 s here: a third of the lease, within half the renew deadline), partitions every 1 s
        for m in members.values():
            m.client.gets.clear()
            m.client.replaced.clear()
        began = clock.now()
        await step_until(lambda: clock.now() - began >= 10, 11)
        for identity, m in members.items():
            assert m.client.gets == [], (identity, m.client.gets)
            renewals = collections.Counter(m.client.replaced)
            assert renewals[f"grp-member-{identity}"] <= 10 / 2 + 1, renewals
            (k,) = m.coordinator.held
            assert renewals[f"grp-shard-{k}"] >= 10 / 1.1 - 1, renewals
        victim = members["pod-c"]
        (lost,) = victim.coordinator.held
        victim.client.alive = False
        given_up = await step_until(lambda: not victim.coordinator.held, 10)
        # its last renewal (<= 1 retry period ago), then the renew deadline (4 s); each of the five
        # waits is rounded up to the 0.1 s steps of the fake clock
        assert given_up <= 1 + 4 + 5 * 0.1 + 0.1, given_up
        taken = given_up + await step_until(
            lambda: any(lost in members[i].coordinator.held for i in ("pod-a", "pod-b")), 20
        )
        # after the lease expired (6 s since its last renewal), within two acquire intervals more
        # not before the lease expired (6 s after its last renewal, at most 1 s before the cut), and
        # within two acquire intervals more (one to see the last renewal, one to retry)
        assert max(given_up, 6 - 1) < taken <= 6 + 2 * 2.2 * 1 + 0.5, taken
        start("pod-d")
        await step_until(lambda: one_each("pod-a", "pod-b", "pod-d"), 30)
        assert overlaps == []
    finally:
        for m in members.values():
            m.coordinator.stop()
        for _ in range(100):
            clock.step(0.1)
            await _yield_to_tasks(10)
        await asyncio.wait_for(asyncio.gather(*(m.task for m in members.values())), 5)
    # the live ones left: their partitions are free and their member Leases gone
    assert {o["spec"].get("holderIdentity") for n, o in world.objects.items() if "-shard-" in n} == {""}
    assert [n for n in world.objects if "-member-" in n] == ["grp-member-pod-c"]  # the cut-off one


class FakeScope:
    """Records the scope selectors the coordinator sets, in the target's timeline."""

    def __init__(self, target: FakeTarget) -> None:
        self.target = target
        self.selectors: list[str | None] = []
        self.adding: list[str | None] = []
        self.changed = asyncio.Event()

    async def set_scope(self, label_selector: str | None, *, adding: str | None = None) -> None:
        await asyncio.sleep(0)  # a LIST takes a while: the coordinator must wait for it
        self.selectors.append(label_selector)
        self.adding.append(adding)
        self.target.timeline.append(("set_scope", label_selector))
        self.changed.set()


async def test_a_shard_lists_its_partitions_children_before_reconciling_and_narrows_after_the_drain() -> None:
    client = fakes.FakeClient()
    config = shardgroup.ShardConfig(
        "ops", "grp", "pod-a", 3, shard_id=1, lease_duration=6, renew_deadline=4, retry_period=1
    )
    target = FakeTarget(client, [Request("ns", f"isvc-{i}") for i in range(6)])
    scope = FakeScope(target)
    coordinator = sharding.ShardCoordinator(
        client,
        config,
        [target],
        scope=scope,
        registry=CollectorRegistry(),
        clock=FakeClock(),
        rand=lambda: 0.0,
    )
    assert coordinator.scope_selector() == partitioning.partition_selector((), 3)  # nothing before a Lease
    task = asyncio.create_task(coordinator.run())
    try:
        await asyncio.wait_for(target.gained.wait(), 5)
        mine = partitioning.partition_selector({1}, 3)
        assert [e[0] for e in target.timeline] == ["set_scope", "enqueue_all"]  # listed, then enqueued
        assert scope.selectors == [mine] and coordinator.scope_selector() == mine
        assert scope.adding == [mine]  # only more selected: just the added partition is listed
        scope.changed.clear()
        await coordinator._partitions.drop(
            1, "test: leadership lost"
        )  # what _hold does when the Lease is lost
        await asyncio.wait_for(scope.changed.wait(), 5)  # narrowed in the background
        assert [e[0] for e in target.timeline] == ["set_scope", "enqueue_all", "wait_idle", "set_scope"]
        assert scope.selectors[-1] == partitioning.partition_selector((), 3)
        assert scope.adding[-1] is None  # narrowing re-lists what stays
    finally:
        coordinator.stop()
        await asyncio.wait_for(task, 5)


async def test_the_heir_lists_a_silent_holders_partition_ahead_and_drops_it_when_it_renews() -> None:
    clock = FakeClock()
    target = FakeTarget(fakes.FakeClient(), [])
    scope = FakeScope(target)
    coordinator = sharding.ShardCoordinator(
        fakes.FakeClient(), CONFIG, [target], scope=scope, registry=CollectorRegistry(), clock=clock
    )
    view = coordinator.view
    # pod-b_1 holds partition 1 and pod-c_1 partition 2, both members renewing; pod-a_1 holds nothing
    leases = {
        "b": _lease("grp-member-pod-b-1", "pod-b_1", "t0", "member"),
        "c": _lease("grp-member-pod-c-1", "pod-c_1", "t0", "member"),
        "1": _lease("grp-shard-1", "pod-b_1", "t0", "partition"),
        "2": _lease("grp-shard-2", "pod-c_1", "t0", "partition"),
    }
    for obj in leases.values():
        view.on_add(obj)

    def renew(key: str, at: str) -> None:
        old = leases[key]
        leases[key] = copy.deepcopy(old)
        leases[key]["spec"]["renewTime"] = at
        view.on_update(old, leases[key])

    for t in ("t1", "t2"):  # both members seen renewing, partitions too
        clock.step(1)
        for key in leases:
            renew(key, t)
    coordinator._prewarm_for_silent_holders()
    # everyone renews: only the free partition 0, which the matching gives pod-a_1, is listed ahead
    assert coordinator._partitions.prewarm == {0}
    await asyncio.wait_for(scope.changed.wait(), 5)
    scope.changed.clear()
    for t in ("t3", "t4", "t5"):  # pod-b_1 falls silent: only pod-c_1 renews
        clock.step(1)
        renew("c", t)
        renew("2", t)
    # the matching without pod-b_1 gives partition 1 (and 0, free) to pod-a_1 or pod-c_1: the
    # partitions pod-a_1 would take among those pod-b_1 holds are listed ahead
    assert partitioning.plan("pod-a_1", 3, ["pod-c_1"], {2: "pod-c_1"}).acquire == {1}  # pod-a_1 is the heir
    scope.changed.clear()
    coordinator._prewarm_for_silent_holders()
    assert coordinator._partitions.prewarm == {1}
    await asyncio.wait_for(scope.changed.wait(), 5)
    assert scope.selectors[-1] == partitioning.partition_selector({1}, 3)
    renew("1", "t6")  # pod-b_1 was only slow: its partition is dropped again
    scope.changed.clear()
    coordinator._prewarm_for_silent_holders()
    assert coordinator._partitions.prewarm == {0}
    await asyncio.wait_for(scope.changed.wait(), 5)
    assert scope.selectors[-1] == partitioning.partition_selector({0}, 3)
