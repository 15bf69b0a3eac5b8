"""Real model serving in tests (the real node, the model store, real requests): the manifests, the
requests and their answers, a continuous load, and the operator with the local cluster's settings.

::

    async with serving.operator(kube_cluster, cluster_name, admin_client, demo.local_settings()):
        await modelstore.grant(admin_client, ns)
        await admin_client.create(api.RESOURCE, serving.iris("iris"), ns)
        await serving.ready(admin_client, ns, "iris")
        async with serving.load(admin_client, ns, "iris") as traffic:
            ...
        assert traffic.errors == []
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from mlops_platform import api, infer
from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.devcluster.modelstore import install as modelstore
from mlops_platform.devcluster.modelstore import manifests as store
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import http, resources, rest
from mlops_platform.testing import background, probes, wait, webhook
from mlops_platform.testing import operator as operator_process

#: KServe's first tutorial's input: version 1 of the demo iris model answers [1, 1], version 2 [2, 2]
QUICKSTART = [[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]
#: images imported; the initializer and MLServer's start on a loaded 2-core machine
READY_TIMEOUT = 240.0


@contextlib.asynccontextmanager
async def operator(
    kube_cluster: Path, cluster_name: str, admin_client: rclient.Client, settings: base.BuildContext
) -> AsyncIterator[rmanager.Manager]:
    """The model store running (images imported, the demo models uploaded), the CRD installed and
    the operator in this process with ``settings``."""
    await asyncio.to_thread(modelstore.install, cluster_name)
    await webhook.install_crd(admin_client)
    async with (
        rclient.Client.from_kubeconfig(str(kube_cluster)) as c,
        operator_process.running(c, settings=settings) as mgr,
    ):
        yield mgr


def iris(
    name: str,
    uri: str = "s3://models/iris/1",
    *,
    memory: str = "1Gi",
    secret: str = store.CLIENT_SECRET,
    replicas: int = 1,
    canary: str | None = None,
    canary_percent: int = 20,
) -> dict[str, Any]:
    """A v1 InferenceService of the demo iris model (MLServer, from the model store)."""
    model = {"format": "sklearn", "storage": {"secretName": secret, "endpoint": store.ENDPOINT}}
    spec: dict[str, Any] = {
        "predictor": {
            "runtime": "seldon",
            "model": {"uri": uri, **model},
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": memory}},
            "autoscaling": {"minReplicas": replicas, "maxReplicas": replicas},
        }
    }
    if canary is not None:
        spec["canary"] = {"model": {"uri": canary}, "trafficPercent": canary_percent}
    return {
        "apiVersion": "mlops.platform/v1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": spec,
    }


def v2(rows: list[list[float]]) -> dict[str, Any]:
    """An Open Inference Protocol v2 request of ``rows`` (4 features each)."""
    return {"inputs": [{"name": "input-0", "shape": [len(rows), 4], "datatype": "FP64", "data": rows}]}


def answer(response: Any) -> list[int]:
    """The predicted classes of a v2 answer."""
    return [int(v) for v in response["outputs"][0]["data"]]


async def ready(c: rclient.Client, ns: str, name: str, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
    """The InferenceService once ``Ready=True``; on a timeout its Ready condition is the message."""

    async def serving() -> dict[str, Any] | None:
        live = await c.get(api.RESOURCE, name, ns)
        return live if probes.condition(live, "Ready").get("status") == "True" else None

    try:
        return await wait.until(serving, timeout=timeout, what=f"{ns}/{name} Ready")
    except TimeoutError:
        live = await c.get(api.RESOURCE, name, ns)
        raise AssertionError(f"{name} not Ready: {probes.condition(live, 'Ready')}") from None


#: one request and its answer's classes (``infer.InferError`` when it failed)
Send = Callable[[], Awaitable[list[int]]]


@dataclasses.dataclass
class Load:
    """Requests one after another until stopped: each answer or error."""

    answers: list[list[int]] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)

    async def run(self, send: Send, rate: float | None = None) -> None:
        """Send until cancelled: back to back, or at most ``rate`` requests per second."""
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            try:
                self.answers.append(await send())
            except infer.InferError as e:
                self.errors.append(str(e))
            if rate:
                due += 1 / rate
                await asyncio.sleep(max(0.0, due - loop.time()))  # pacing, not synchronisation

    async def more(self, n: int, timeout: float = 60.0) -> None:
        """Wait until ``n`` more requests have been answered."""
        want = len(self.answers) + n
        await wait.until(lambda: len(self.answers) >= want, timeout=timeout, what=f"{n} more answers")

    async def then(self, n: int) -> list[list[int]]:
        """The ``n`` answers after now (what the service answers once a change has settled)."""
        settled = len(self.answers)
        await self.more(n)
        return self.answers[settled:]

    def summary(self) -> str:
        return f"{len(self.errors)} of {len(self.answers) + len(self.errors)} failed: {self.errors[:3]}"


@contextlib.asynccontextmanager
async def load(
    c: rclient.Client, ns: str, name: str, send: Send | None = None, *, rate: float | None = None
) -> AsyncIterator[Load]:
    """A continuous load on ``ns/name`` while the block runs: the quickstart request through the API
    server (:func:`mlops_platform.infer.infer`), or ``send`` (another path to it, e.g. a gateway);
    back to back, or paced at ``rate`` requests per second (what a metric needs, at less CPU)."""

    async def through_the_api_server() -> list[int]:
        return answer(await infer.infer(c, name, ns, v2(QUICKSTART)))

    result = Load()
    async with background.task(result.run(send or through_the_api_server, rate)):
        yield result


#: the interval's half-width in standard deviations: a correct router falls outside it once in
#: 100,000 runs (z = 2.576, a 99 % interval, failed a correct 20 % canary at 233 of 1,000 in a make
#: test: once in 100 runs is a flaky test); a 20 % router that sends 10 % or 30 % of 1,000 still fails
Z_TEST = 4.42


def binomial_interval(n: int, p: float, z: float = Z_TEST) -> tuple[float, float]:
    """The 99.999 % interval of a Binomial(n, p) count (normal approximation: n p (1 - p) = 160 for a
    20 % canary over 1,000 requests: 200 +- 56)."""
    sd = math.sqrt(n * p * (1 - p))
    return n * p - z * sd, n * p + z * sd


def promotion(uri: str) -> dict[str, Any]:
    """The patch that promotes the canary's model: the predictor serves it, no canary is asked."""
    return {"spec": {"predictor": {"model": {"uri": uri}}, "canary": None}}


async def until_rolled_out(c: rclient.Client, ns: str, name: str, uri: str, timeout: float = 120.0) -> None:
    await wait.until(lambda: rolled_out(c, ns, name, uri), timeout=timeout, what=f"{name} rolled out {uri}")


async def until_canary_gone(c: rclient.Client, ns: str, name: str, timeout: float = 120.0) -> None:
    await wait.until(lambda: canary_gone(c, ns, name), timeout=timeout, what="canary gone")


async def canary_gone(c: rclient.Client, ns: str, name: str) -> bool:
    """``name``'s canary Deployment and its pods are gone."""
    if not await probes.absent(c, resources.DEPLOYMENT, ns, f"{name}-canary"):
        return False
    selector = f"{labels.INFERENCESERVICE}={name},{labels.COMPONENT}={labels.CANARY}"
    return not (await c.list(resources.POD, ns, label_selector=selector))["items"]


async def rolled_out(c: rclient.Client, ns: str, name: str, uri: str | None = None) -> bool:
    """``name``'s predictor rollout is over: its pods serve ``uri`` (when given: right after a patch
    the Deployment may not have changed yet), every replica updated and available, no other pod left."""
    d = await c.get(resources.DEPLOYMENT, f"{name}-predictor", ns)
    template = d["spec"]["template"]["metadata"].get("annotations") or {}
    if uri is not None and template.get(labels.MODEL_URI_ANNOTATION) != uri:
        return False
    st, want = d.get("status") or {}, d["spec"].get("replicas", 1)
    if st.get("observedGeneration", 0) < d["metadata"]["generation"]:
        return False
    if not st.get("updatedReplicas") == st.get("availableReplicas") == st.get("replicas") == want:
        return False
    selector = f"{labels.INFERENCESERVICE}={name},{labels.COMPONENT}={labels.PREDICTOR}"
    pods = await c.list(resources.POD, ns, label_selector=selector)
    return bool(len(pods["items"]) == want)


async def pod_states(c: rclient.Client, ns: str, name: str) -> str:
    """Each pod of ``name``: phase, readiness, restarts and last termination (for failure messages)."""
    pods = await c.list(resources.POD, ns, label_selector=f"{labels.INFERENCESERVICE}={name}")
    out = []
    for pod in pods["items"]:
        for cs in (pod.get("status") or {}).get("containerStatuses") or ():
            last = ((cs.get("lastState") or {}).get("terminated")) or {}
            out.append(
                f"{pod['metadata']['name']}: {pod['status'].get('phase')} ready={cs.get('ready')} "
                f"restarts={cs.get('restartCount')} last={last.get('reason')}"
            )
    return "; ".join(out) or "no pods"


async def ready_endpoints(c: rclient.Client, ns: str, service: str) -> int:
    """The ready endpoints of ``service`` (its EndpointSlices): the backends a request can land on."""
    slices = await c.list(
        resources.ENDPOINT_SLICE, ns, label_selector=f"kubernetes.io/service-name={service}"
    )
    return sum(
        1
        for s in slices["items"]
        for e in s.get("endpoints") or ()
        if (e.get("conditions") or {}).get("ready") is True
    )


@dataclasses.dataclass
class Timeline:
    """What the route did while a block ran, for a failure message: each change of the predictor
    Service's selector, of its ready endpoints and of each pod's readiness, with its time."""

    changes: list[str] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        return "; ".join(self.changes) or "no change"


async def _route_state(c: rclient.Client, ns: str, name: str) -> dict[str, str]:
    svc = await c.get(resources.SERVICE, f"{name}-predictor", ns)
    state = {"selector": ",".join(sorted(f"{k}={v}" for k, v in svc["spec"].get("selector", {}).items()))}
    slices = await c.list(
        resources.ENDPOINT_SLICE, ns, label_selector=f"kubernetes.io/service-name={name}-predictor"
    )
    for s in slices["items"]:
        for e in s.get("endpoints") or ():
            pod = (e.get("targetRef") or {}).get("name", "?")
            state[f"endpoint {pod}"] = f"ready={(e.get('conditions') or {}).get('ready')}"
    pods = await c.list(resources.POD, ns, label_selector=f"{labels.INFERENCESERVICE}={name}")
    for pod in pods["items"]:
        ready = probes.condition(pod, "Ready").get("status")
        state[f"pod {pod['metadata']['name']}"] = f"Ready={ready}"
    return state


@contextlib.asynccontextmanager
async def timeline(c: rclient.Client, ns: str, name: str, every: float = 0.25) -> AsyncIterator[Timeline]:
    """Record :class:`Timeline` while the block runs (it only reads: a diagnostic, never a wait)."""
    out, start, last = Timeline(), time.monotonic(), dict[str, str]()

    async def poll() -> None:
        nonlocal last
        while True:
            with contextlib.suppress(rest.ApiError, http.TransportError):
                now = await _route_state(c, ns, name)
                for key in sorted(now.keys() | last.keys()):
                    if now.get(key) != last.get(key):
                        out.changes.append(f"{time.monotonic() - start:.1f}s {key}: {now.get(key, 'gone')}")
                last = now
            await asyncio.sleep(every)

    async with background.task(poll()):
        yield out
