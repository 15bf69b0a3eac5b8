#!/usr/bin/env python3
"""The raw writer: the scale benchmark's ceiling (``bench/scale.py``).

It makes the writes the job needs and nothing else, straight from watch events: no cache, no work
queue, no level-based reconcile, no diff. For every InferenceService ADDED to ``--namespace``: the
operator's own children (the same pure builders, owner reference and desired-hash annotation: the
same bytes on the wire) server-side applied, one status write and one Event; for every Deployment
whose ``availableReplicas`` first reaches 1, one more status write on its InferenceService. Both
status writes carry the status the operator computes (``status.compute`` from the applies' answers,
then with the available Deployment: every child's condition, replicas, url, ``lastReconcileTime``),
so the API server stores, converts and sends the same bytes as for the operator: a status of one
``Ready`` condition, as this writer first wrote, costs the API server about 2 ms less per write
(its ``customresource`` status updates in two 100 s CPU profiles). At most ``--concurrency``
requests are in flight. It watches and writes
InferenceServices at ``mlops.platform/v1`` only, the storage version (as the operator does): the API
server never converts them.

On SIGTERM it writes its request counts (verb, resource, code) as JSON to ``--report`` and exits.
Run by ``bench.scale``; standalone::

    .venv/bin/python -m bench.raw_writer --kubeconfig K --namespace bench --concurrency 64 --report F
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import contextlib
import dataclasses
import json
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from bench import _common as common

FIELD_MANAGER = "mlops-platform"


async def watch_forever(
    client: Any, resource: Any, namespace: str, on_event: Callable[[str, dict[str, Any]], None]
) -> None:
    """LIST once, then WATCH from there: a watch that ends or fails to connect (an API server too
    busy to answer: ``ConnectionTimeoutError``) is started again from the last version seen, a 410
    lists again (every object is seen as ADDED once per LIST)."""
    from mlops_platform.runtime.transport import client as rclient

    rv: str | None = None
    while True:
        if rv is None:
            listing = await client.list(resource, namespace)
            for obj in listing.get("items", []):
                on_event("ADDED", obj)
            rv = listing["metadata"]["resourceVersion"]
        try:
            async for ev in client.watch(resource, namespace, resource_version=rv, timeout_seconds=3600):
                rv = (ev["object"].get("metadata") or {}).get("resourceVersion") or rv
                if ev["type"] == "BOOKMARK":
                    continue
                on_event(ev["type"], ev["object"])
        except rclient.ApiError as e:
            if not e.gone:
                raise
            rv = None
        except rclient.TransportError as e:
            print(f"raw writer: watching {resource.plural} again after {e!r}", file=sys.stderr, flush=True)
            await asyncio.sleep(1.0)


class RawWriter:
    def __init__(self, client: Any, namespace: str, concurrency: int) -> None:
        from mlops_platform.controllers.inferenceservice.children import base

        self.client = client
        self.namespace = namespace
        self.slots = asyncio.Semaphore(concurrency)
        self.ctx = base.BuildContext(monitoring=False)
        self.started: set[str] = set()
        self.ready: set[str] = set()
        #: per InferenceService: its first status write done (the Ready=True write waits for it),
        #: the children as their applies answered, and that first status
        self.first: dict[str, asyncio.Event] = {}
        self.observed: dict[str, tuple[Any, list[Any], dict[str, Any]]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.failures = 0
        self.retries = 0  # applies answered 5xx (a server-side timeout at N=5000) and sent again

    def spawn(self, aw: Awaitable[None]) -> None:
        async def guarded() -> None:
            try:
                await aw
            except Exception as e:  # count and keep going: the benchmark reports it
                self.failures += 1
                print(f"raw writer: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

        task = asyncio.get_running_loop().create_task(guarded())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self.slots:
            yield

    # -- InferenceServices ----------------------------------------------------------------------

    def on_isvc(self, type_: str, raw: dict[str, Any]) -> None:
        name = raw["metadata"]["name"]
        if type_ != "ADDED" or name in self.started:
            return
        self.started.add(name)
        self.spawn(self.create_children(raw))

    async def create_children(self, raw: dict[str, Any]) -> None:
        from mlops_platform import api
        from mlops_platform.controllers.inferenceservice import reconciler, status
        from mlops_platform.runtime.control import childsync

        name = raw["metadata"]["name"]
        first = self.first.setdefault(name, asyncio.Event())
        try:
            isvc = api.decode(raw)
            desired = common.desired_children(isvc, self.ctx)
            writes: list[Awaitable[Any]] = []
            created: list[str] = []
            for slot, want in desired:
                if want is None or slot.child.kind.optional:
                    continue
                resource = slot.child.kind.resource()
                want["apiVersion"] = resource.api_version
                childsync.prepare(want, raw, reconciler.HASH_ANNOTATION)  # as the operator's syncer
                writes.append(self.apply(resource, want))
                created.append(f"{resource.kind}/{want['metadata']['name']}")
            answers = iter(await asyncio.gather(*writes))
            observed = [
                status.Observed(slot, want, next(answers) if want is not None else None)
                if not slot.child.kind.optional or want is None
                else status.Observed(slot, want, None, "missing")
                for slot, want in desired
            ]
            st = status.compute(isvc, {}, observed, [], None, self.ctx)
            self.observed[name] = (isvc, observed, st)
            await asyncio.gather(self.status(raw, st), self.event(raw, "created " + ", ".join(created)))
        finally:
            first.set()

    async def apply(
        self, resource: Any, obj: dict[str, Any], subresource: str | None = None
    ) -> dict[str, Any]:
        """A server-side apply; one answered 5xx (the API server's 60 s timeout while Services queue
        for their ClusterIPs at N=5000) is sent again after a second, as the operator's requeue
        would: an apply is idempotent. Up to 5 attempts."""
        from mlops_platform.runtime.transport import client as rclient

        attempts = 1
        while True:
            try:
                async with self.slot():
                    answer: dict[str, Any] = await self.client.apply(
                        resource, obj, field_manager=FIELD_MANAGER, force=True, subresource=subresource
                    )
                    return answer
            except rclient.ApiError as e:
                if e.status < 500 or attempts == 5:
                    raise
            attempts += 1
            self.retries += 1
            await asyncio.sleep(1.0)

    async def status(self, raw: dict[str, Any], st: dict[str, Any]) -> None:
        from mlops_platform import api
        from mlops_platform.controllers.inferenceservice import conditions

        body = {  # at v1, whatever version ``raw`` (a watch event or an owner reference) names
            "apiVersion": api.RESOURCE.api_version,
            "kind": api.RESOURCE.kind,
            "metadata": {"name": raw["metadata"]["name"], "namespace": self.namespace},
            "status": {**st, "lastReconcileTime": conditions.now_rfc3339()},
        }
        await self.apply(api.RESOURCE, body, subresource="status")

    async def available(self, raw: dict[str, Any], dep: dict[str, Any]) -> None:
        """The status once the Deployment is available: computed as the operator does, from the
        children's answers with this Deployment, over the first status (written before it)."""
        from mlops_platform.controllers.inferenceservice import status

        name = raw["metadata"]["name"]
        await self.first.setdefault(name, asyncio.Event()).wait()
        isvc, observed, previous = self.observed.pop(name)
        now = [
            dataclasses.replace(o, live=dep)
            if o.live is not None
            and o.live.get("kind") == "Deployment"
            and o.slot.name == dep["metadata"]["name"]
            else o
            for o in observed
        ]
        await self.status(raw, status.compute(isvc, previous, now, [], None, self.ctx))

    async def event(self, raw: dict[str, Any], note: str) -> None:
        from mlops_platform.runtime import clock
        from mlops_platform.runtime.transport import resources

        name = raw["metadata"]["name"]
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"generateName": f"{name}-", "namespace": self.namespace},
            "eventTime": clock.rfc3339(clock.utcnow(), 6),
            "reportingController": "mlops.platform/raw-writer",
            "reportingInstance": "raw-writer",
            "action": "Create",
            "reason": "Created",
            "type": "Normal",
            "note": note,
            "regarding": {
                "apiVersion": raw["apiVersion"],
                "kind": raw["kind"],
                "name": name,
                "namespace": self.namespace,
                "uid": raw["metadata"]["uid"],
            },
        }
        async with self.slot():
            await self.client.create(resources.EVENT, body, self.namespace)

    # -- Deployments ------------------------------------------------------------------------------

    def on_deployment(self, type_: str, dep: dict[str, Any]) -> None:
        owner = next((r for r in dep["metadata"].get("ownerReferences", []) if r.get("controller")), None)
        if owner is None or owner["name"] in self.ready:
            return
        if (dep.get("status") or {}).get("availableReplicas", 0) < 1:
            return
        self.ready.add(owner["name"])
        raw = {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "metadata": {"name": owner["name"], "uid": owner["uid"], "generation": 1},
        }
        self.spawn(self.available(raw, dep))


async def run(args: argparse.Namespace) -> int:
    from mlops_platform import api
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    client = rclient.Client.from_kubeconfig(args.kubeconfig)
    writer = RawWriter(client, args.namespace, args.concurrency)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    watches = [
        asyncio.create_task(watch_forever(client, api.RESOURCE, args.namespace, writer.on_isvc)),
        asyncio.create_task(
            watch_forever(client, resources.DEPLOYMENT, args.namespace, writer.on_deployment)
        ),
    ]
    print("raw writer: watching", flush=True)
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([stopper, *watches], return_when=asyncio.FIRST_COMPLETED)
    for t in watches:
        t.cancel()
    for t in list(writer.tasks):
        t.cancel()
    await asyncio.gather(*watches, *writer.tasks, return_exceptions=True)
    await client.close()
    counts = sorted(client.requests.items())
    report = {
        "requests": [{"verb": v, "resource": r, "code": c, "count": n} for (v, r, c), n in counts],
        "failures": writer.failures,
        "retries": writer.retries,
    }
    with open(args.report, "w") as out:  # noqa: ASYNC230 (once, at exit)
        json.dump(report, out, indent=2)
    failed = [t for t in watches if t in done and not t.cancelled() and t.exception() is not None]
    if failed:
        print(f"raw writer: a watch failed: {failed[0].exception()!r}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--report", required=True)
    return asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
