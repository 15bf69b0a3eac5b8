#!/usr/bin/env python3
"""CPU per API request of candidate asyncio HTTP stacks, on the same workload, against a real API server.

The operator's profile at N=1000 put 47 % of its CPU inside ``Client.request`` (httpx2 -> httpcore2 ->
anyio -> TLS). This benchmark measures, per HTTP stack, the CPU this process spends per request
(``time.process_time()``: user + system of the whole process, so TLS and the event loop count) for
the operator's two hot requests, each ``--requests`` times with ``--concurrency`` in flight:

- ``get``: GET of one small ConfigMap (read path: decode);
- ``apply``: server-side apply of a Deployment the size of a predictor's (write path: encode +
  decode of ~4 KiB each way; after the first, an unchanged apply).

Stacks (kubeconfig, TLS context and auth always come from lightkube's config layer):

- ``httpx2``: what the runtime used until this benchmark: lightkube's ``httpx2.AsyncClient`` (HTTP/1.1);
- ``httpx2-http2``: the same with ``http2=True`` (one TLS connection, multiplexed streams);
- ``aiohttp``: ``aiohttp.ClientSession`` with lightkube's SSL context and auth header (C HTTP parser);
- ``runtime``: :class:`mlops_platform.runtime.transport.client.Client` as it is now, end to end
  (JSON encode/decode and request accounting included).

Runs are interleaved (``--repeat`` rounds of every stack) and the table shows the median.

    .venv/bin/python -m bench.http_stack --kubeconfig K [--requests 2000] [--concurrency 16] [--repeat 3]
"""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argparse
import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import msgspec

from bench import _common as common

NAMESPACE = "bench-http"
STACKS = ("httpx2", "httpx2-http2", "aiohttp", "runtime")
OPS = ("get", "apply")


@dataclass(frozen=True)
class Run:
    stack: str
    op: str
    requests: int
    concurrency: int
    cpu_seconds: float
    wall_seconds: float

    @property
    def cpu_us_per_request(self) -> float:
        return self.cpu_seconds / self.requests * 1e6


def deployment(name: str) -> dict[str, Any]:
    from mlops_platform.controllers.inferenceservice import children
    from mlops_platform.controllers.inferenceservice.children import base
    from mlops_platform.testing import isvc

    raw = isvc.manifest(
        name,
        namespace=NAMESPACE,
        metadata={"uid": "00000000-0000-0000-0000-000000000000", "generation": 1},
        modelUri="s3://models/bench/http",
        framework="triton",
        minReplicas=0,
        maxReplicas=1,
        resources={"cpuRequest": "100m", "memoryRequest": "128Mi"},
    )
    from mlops_platform import api

    target = next(s.target for s in base.slots(api.decode(raw), children.CHILDREN))
    built = children.deployment.build(target, base.BuildContext())
    assert built is not None
    built["apiVersion"] = "apps/v1"
    return built


Send = Callable[[str, str, bytes | None, str], Awaitable[bytes]]


async def _drive(send: Send, op: str, n: int, concurrency: int, body: bytes) -> tuple[float, float]:
    cm = f"/api/v1/namespaces/{NAMESPACE}/configmaps/bench-http"
    name = msgspec.json.decode(body)["metadata"]["name"]
    dep = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}?fieldManager=bench-http&force=true"
    queue = iter(range(n))

    async def worker() -> None:
        for _ in queue:
            if op == "get":
                await send("GET", cm, None, "")
            else:
                await send("PATCH", dep, body, "application/apply-patch+yaml")

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.process_time() - cpu0, time.perf_counter() - wall0


async def measure(stack: str, kubeconfig: str, op: str, n: int, concurrency: int, body: bytes) -> Run:
    from lightkube.config import client_adapter
    from lightkube.config import kubeconfig as lk_kubeconfig

    from mlops_platform.runtime.transport import client as rclient

    single = lk_kubeconfig.KubeConfig.from_file(Path(kubeconfig)).get()
    assert single is not None and single.user is not None
    decoder = msgspec.json.Decoder()
    if stack in ("httpx2", "httpx2-http2"):
        import httpx2 as httpx

        params = client_adapter.ConnectionParams(
            timeout=httpx.Timeout(30.0), trust_env=False, http2=stack == "httpx2-http2"
        )
        http = client_adapter.AsyncClient(single, params)

        async def send(method: str, path: str, content: bytes | None, ctype: str) -> bytes:
            headers = {"Accept": "application/json"}
            if ctype:
                headers["Content-Type"] = ctype
            r = await http.request(method, path, content=content, headers=headers)
            r.raise_for_status()
            decoder.decode(r.content)
            return r.content

        try:
            await send("GET", f"/api/v1/namespaces/{NAMESPACE}", None, "")  # connect + warm up
            cpu, wall = await _drive(send, op, n, concurrency, body)
        finally:
            await http.aclose()
    elif stack == "aiohttp":
        import aiohttp

        ctx = client_adapter.verify_cluster(single.cluster, single.user, single.abs_file, trust_env=False)
        auth = client_adapter.user_auth(single.user)
        header = getattr(auth, "_bearer", None)
        base = single.cluster.server.rstrip("/")
        connector = aiohttp.TCPConnector(ssl=ctx, limit=100)
        session = aiohttp.ClientSession(connector=connector)

        async def send(method: str, path: str, content: bytes | None, ctype: str) -> bytes:
            headers = {"Accept": "application/json"}
            if header:
                headers["Authorization"] = header
            if ctype:
                headers["Content-Type"] = ctype
            async with session.request(method, base + path, data=content, headers=headers) as r:
                data = await r.read()
                r.raise_for_status()
            decoder.decode(data)
            return data

        try:
            await send("GET", f"/api/v1/namespaces/{NAMESPACE}", None, "")
            cpu, wall = await _drive(send, op, n, concurrency, body)
        finally:
            await session.close()
    else:
        c = rclient.Client.from_kubeconfig(kubeconfig)
        dep_body = msgspec.json.decode(body)
        res = await c.resource_for("apps/v1", "Deployment")

        async def send(method: str, path: str, content: bytes | None, ctype: str) -> bytes:
            if method == "GET":
                await c.request("GET", path, resource="configmaps")
            else:
                await c.apply(res, dep_body, field_manager="bench-http", force=True)
            return b""

        try:
            await send("GET", f"/api/v1/namespaces/{NAMESPACE}", None, "")
            cpu, wall = await _drive(send, op, n, concurrency, body)
        finally:
            await c.close()
    return Run(stack, op, n, concurrency, cpu, wall)


async def prepare(kubeconfig: str) -> bytes:
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    body = deployment("bench-http")
    async with rclient.Client.from_kubeconfig(kubeconfig) as c:
        await common.wait_while_terminating(c, NAMESPACE)
        try:
            await c.create(resources.NAMESPACE, {"metadata": {"name": NAMESPACE}})
        except rclient.ApiError as e:
            if not e.conflict:
                raise
        cm = {"metadata": {"name": "bench-http", "namespace": NAMESPACE}, "data": {"k": "v" * 200}}
        try:
            await c.create(resources.CONFIG_MAP, cm)
        except rclient.ApiError as e:
            if not e.conflict:
                raise
        await c.apply(resources.DEPLOYMENT, body, field_manager="bench-http", force=True)
    return msgspec.json.encode(body)


async def cleanup(kubeconfig: str) -> None:
    from mlops_platform.runtime.transport import client as rclient

    async with rclient.Client.from_kubeconfig(kubeconfig) as c:
        await common.delete_namespace(c, NAMESPACE, wait=120, poll=0.5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--stacks", nargs="+", default=list(STACKS), choices=STACKS)
    p.add_argument("--json")
    a = p.parse_args(argv)

    body = asyncio.run(prepare(a.kubeconfig))
    runs: list[Run] = []
    try:
        for r in range(a.repeat):
            for op in OPS:
                for stack in a.stacks:
                    run = asyncio.run(measure(stack, a.kubeconfig, op, a.requests, a.concurrency, body))
                    common.log(
                        f"round {r + 1}/{a.repeat} {op:5} {stack:13} "
                        f"{run.cpu_us_per_request:7.0f} us CPU/req, "
                        f"{a.requests / run.wall_seconds:6.0f} req/s"
                    )
                    runs.append(run)
    finally:
        asyncio.run(cleanup(a.kubeconfig))
    rows = []
    for op in OPS:
        for stack in a.stacks:
            mine = [x for x in runs if x.op == op and x.stack == stack]
            cpu = statistics.median(x.cpu_us_per_request for x in mine)
            rate = statistics.median(x.requests / x.wall_seconds for x in mine)
            rows.append([op, stack, f"{cpu:.0f}", f"{rate:.0f}"])
    print(f"requests per run: {a.requests}, in flight: {a.concurrency}, rounds: {a.repeat} (median shown)\n")
    print(common.markdown_table(["request", "stack", "CPU us / request", "requests / s"], rows))
    if a.json:
        common.write_json(a.json, {"machine": common.machine_info(), "runs": [asdict(x) for x in runs]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
