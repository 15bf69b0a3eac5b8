"""Canary rollouts end to end, for each traffic router (``istio``, ``gateway-api``, ``replicas``).

One operator per router (module-scoped, in this process, admin credentials, no leader election),
watching only its own namespace: the tests of a router share that namespace and use distinct
object names. Every wait is on a condition with a timeout; the loops that sample the route are
measurements (each sample is a few GETs, ~50 ms apart), not synchronisation.

What is checked: the route carries the asked split once the candidate can serve, follows a change
of ``canaryPercent`` within seconds, and the status reports the split the route carries;
promotion and rollback leave one component and no stale route entry; a weight > 0 never points at
a Service without a ready endpoint (sampled during promotion, a new canary's entry into the route
and a rollback); a crashing candidate never gets traffic; a converged canary costs no write.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import isvc, plugin, probes, requests, stages, wait, webhook
from mlops_platform.testing import operator as operator_process

ISVC = isvc.RESOURCE  # v1alpha1 objects: every request goes through the conversion webhook
VIRTUAL_SERVICE = rclient.Resource("networking.istio.io", "v1", "virtualservices", "VirtualService")
HTTP_ROUTE = rclient.Resource("gateway.networking.k8s.io", "v1", "httproutes", "HTTPRoute")
STAGE = rclient.Resource("kwok.x-k8s.io", "v1alpha1", "stages", "Stage", namespaced=False)
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
COMPONENT_LABEL = "mlops.platform/component"
PREDICTOR, CANARY = "predictor", "canary"
ROUTERS = [base.Router.ISTIO, base.Router.GATEWAY_API, base.Router.REPLICAS]
WEIGHTED = (base.Router.ISTIO, base.Router.GATEWAY_API)

V1, V2, V3 = "s3://models/bert/v1", "s3://models/bert/v2", "s3://models/bert/v3"
# the acceptance bounds (the waits' own timeouts are longer, so a miss reports the figure)
FOLLOW_WITHIN = 5.0  # seconds from a canaryPercent patch to the route carrying it
SAMPLE_EVERY = 0.05  # seconds between two samples of the route and the endpoints
CRASH_WATCH = 3.0  # seconds the route is sampled after CanaryReady turned False for a crash
#: seconds from the route carrying a split to status.traffic reporting it
STATUS_WITHIN = 5.0
WINDOW = 10.0  # seconds of steady state over which the operator's writes are counted
TIMEOUT = 90.0


@dataclasses.dataclass
class Env:
    router: base.Router
    namespace: str
    manager: rmanager.Manager
    #: the operator's own client (its request counters)
    client: rclient.Client
    #: the samplers' client (their own connections: the test's waits do not delay the samples)
    sampling: rclient.Client

    @property
    def stable_replicas(self) -> int:
        """4 for the replicas router (20 % is then exactly 1 canary of 5 endpoints), else 2."""
        return 4 if self.router is base.Router.REPLICAS else 2


@pytest.fixture(scope="module", params=ROUTERS, ids=[r.value for r in ROUTERS])
async def env(
    request: pytest.FixtureRequest, kube_cluster: Path, admin_client: rclient.Client
) -> AsyncIterator[Env]:
    """The operator with ``--traffic-router`` = the param, watching one fresh namespace."""
    router: base.Router = request.param
    await webhook.install_crd(admin_client)
    async with (
        plugin.temporary_namespace(admin_client, f"canary-{router.value}") as ns,
        rclient.Client.from_kubeconfig(str(kube_cluster)) as c,
        rclient.Client.from_kubeconfig(str(kube_cluster)) as sampling,
    ):
        # an HTTPRoute may name a Gateway that does not exist: none is created
        gateway = f"{ns}/gw" if router is base.Router.GATEWAY_API else None
        settings = base.BuildContext(router=router, gateway=gateway)
        what = f"operator ({router.value} router) ready"
        async with operator_process.running(c, namespace=ns, settings=settings, what=what) as mgr:
            yield Env(router, ns, mgr, c, sampling)


def _isvc(env: Env, name: str, **spec: Any) -> dict[str, Any]:
    n = env.stable_replicas
    fields: dict[str, Any] = {
        "modelUri": V1,
        "framework": "torchserve",
        "minReplicas": n,
        "maxReplicas": n,
    }
    return isvc.manifest(name, **(fields | spec))


@contextlib.asynccontextmanager
async def _created(c: rclient.Client, env: Env, name: str, **spec: Any) -> AsyncIterator[None]:
    """The InferenceService ``name``, deleted at the end (the tests of a router share a namespace)."""
    await c.create(ISVC, _isvc(env, name, **spec), env.namespace)
    try:
        yield
    finally:
        with contextlib.suppress(rclient.ApiError):
            await c.delete(ISVC, name, env.namespace, propagation_policy="Background")


async def _patch(c: rclient.Client, env: Env, name: str, spec: dict[str, Any]) -> None:
    await c.patch(ISVC, name, {"spec": spec}, namespace=env.namespace)


async def _cond(
    c: rclient.Client, env: Env, name: str, type_: str, status: str, reason: str | None = None
) -> dict[str, Any]:
    return await wait.for_condition(c, ISVC, env.namespace, name, type_, status, reason, timeout=TIMEOUT)


# -- what the route does now, read from the cluster (not from the operator's own helpers) ----------


def _fqdn(env: Env, service: str) -> str:
    return f"{service}.{env.namespace}.svc.cluster.local"


async def _route_object(c: rclient.Client, env: Env, name: str) -> dict[str, Any] | None:
    """The router's object: the VirtualService / HTTPRoute ``name``, the predictor Service (replicas)."""
    if env.router is base.Router.ISTIO:
        return await probes.get_or_none(c, VIRTUAL_SERVICE, env.namespace, name)
    if env.router is base.Router.GATEWAY_API:
        return await probes.get_or_none(c, HTTP_ROUTE, env.namespace, name)
    return await probes.get_or_none(c, resources.SERVICE, env.namespace, f"{name}-{PREDICTOR}")


def _weights_of(env: Env, name: str, route: dict[str, Any] | None) -> dict[str, int] | None:
    """The weight of each Service in a VirtualService / HTTPRoute, by component key (a foreign
    destination keeps its full name); None without a route object. The replicas router: the
    predictor Service gets the traffic; selecting the canary pods counts as a weight to the canary."""
    if env.router is base.Router.REPLICAS:
        if route is None:
            return None
        selector = route["spec"].get("selector") or {}
        return {PREDICTOR: 100} | ({} if COMPONENT_LABEL in selector else {CANARY: 1})
    if route is None:
        return None
    out: dict[str, int] = {}
    if env.router is base.Router.ISTIO:
        destinations = route["spec"]["http"][0]["route"]
        for d in destinations:
            # Istio: a destination without a weight gets 100 when alone, else 0
            host, weight = d["destination"]["host"], d.get("weight", 100 if len(destinations) == 1 else 0)
            key = next((k for k in (PREDICTOR, CANARY) if host == _fqdn(env, f"{name}-{k}")), host)
            out[key] = out.get(key, 0) + int(weight)
    else:
        for b in route["spec"]["rules"][0]["backendRefs"]:
            ref, weight = b["name"], b.get("weight", 1)
            key = next((k for k in (PREDICTOR, CANARY) if ref == f"{name}-{k}"), ref)
            out[key] = out.get(key, 0) + int(weight)
    return out


async def _weights(c: rclient.Client, env: Env, name: str) -> dict[str, int] | None:
    return _weights_of(env, name, await _route_object(c, env, name))


async def _ready_endpoints(c: rclient.Client, env: Env, name: str) -> dict[str, int]:
    """Ready endpoints of the EndpointSlices of ``<name>-predictor`` and ``<name>-canary``."""

    async def count(key: str) -> int:
        slices = await c.list(
            resources.ENDPOINT_SLICE, env.namespace, label_selector=f"{SERVICE_NAME_LABEL}={name}-{key}"
        )
        return sum(
            1
            for s in slices["items"]
            for e in s.get("endpoints") or ()
            if (e.get("conditions") or {}).get("ready", True)
        )

    predictor, canary = await asyncio.gather(count(PREDICTOR), count(CANARY))
    return {PREDICTOR: predictor, CANARY: canary}


def _traffic(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["component"]: t for t in (obj.get("status") or {}).get("traffic") or ()}


async def _deployment_available(c: rclient.Client, env: Env, name: str, model: str) -> dict[str, Any] | None:
    """The Deployment ``name`` once every replica runs ``model`` and is available."""
    dep = await probes.get_or_none(c, resources.DEPLOYMENT, env.namespace, name)
    if dep is None:
        return None
    spec, st = dep["spec"], dep.get("status") or {}
    want = spec.get("replicas")
    env_vars = {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}
    done = (
        st.get("observedGeneration") == dep["metadata"]["generation"]
        and want
        and st.get("updatedReplicas") == st.get("replicas") == st.get("availableReplicas") == want
        and env_vars.get("MODEL_URI") == model
    )
    return dep if done else None


async def _until(probe: Callable[[], Awaitable[Any]], what: str, timeout: float = TIMEOUT) -> Any:
    return await wait.until(probe, timeout=timeout, interval=0.05, what=what)


async def _endpoint_share(c: rclient.Client, env: Env, name: str) -> tuple[int, int]:
    """The replicas router's data plane: (ready canary pods, ready endpoints) of the predictor
    Service's EndpointSlices."""
    slices = await c.list(
        resources.ENDPOINT_SLICE, env.namespace, label_selector=f"{SERVICE_NAME_LABEL}={name}-{PREDICTOR}"
    )
    ready = [
        (e.get("targetRef") or {}).get("name", "")
        for s in slices["items"]
        for e in s.get("endpoints") or ()
        if (e.get("conditions") or {}).get("ready", True)
    ]
    return sum(1 for pod in ready if pod.startswith(f"{name}-{CANARY}-")), len(ready)


async def _canary_converged(
    c: rclient.Client, env: Env, name: str, model: str, percent: int, canary_replicas: int
) -> dict[str, Any]:
    """Wait until both Deployments are available, the route carries ``100 - percent`` / ``percent``
    (the replicas router: that share of the predictor Service's ready endpoints are canary pods),
    ``CanaryReady=True/Canary`` and ``Ready=True``; return the InferenceService."""
    ns, n = env.namespace, env.stable_replicas
    stable = (await c.get(ISVC, name, ns))["spec"]["modelUri"]
    await _until(
        lambda: _deployment_available(c, env, f"{name}-{PREDICTOR}", stable), f"{name}-predictor available"
    )
    dep = await _until(
        lambda: _deployment_available(c, env, f"{name}-{CANARY}", model), f"{name}-canary available"
    )
    assert dep["spec"]["replicas"] == canary_replicas
    # the replicas router: the predictor Service takes everything and selects the canary pods too
    weighted = env.router in WEIGHTED
    want = {PREDICTOR: 100 - percent, CANARY: percent} if weighted else {PREDICTOR: 100, CANARY: 1}

    async def split() -> bool:
        return await _weights(c, env, name) == want

    await _until(split, f"route {want}")
    if env.router is base.Router.REPLICAS:

        async def endpoints() -> bool:
            return await _endpoint_share(c, env, name) == (canary_replicas, n + canary_replicas)

        await _until(endpoints, f"{canary_replicas} canary of {n + canary_replicas} endpoints")

    async def conditions() -> dict[str, Any]:
        obj = await c.get(ISVC, name, ns)
        # a failed probe is retried; its message is what the timeout reports
        assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
        for type_, reason in (
            ("CanaryReady", "Canary"),
            ("Ready", None),
            ("CanaryDeploymentAvailable", None),
        ):
            cond = probes.condition(obj, type_)
            assert cond.get("status") == "True" and reason in (None, cond["reason"]), cond
        return obj

    done: dict[str, Any] = await _until(
        conditions, "CanaryReady=True/Canary, Ready, CanaryDeploymentAvailable"
    )
    return done


async def _split_reported(
    c: rclient.Client, env: Env, name: str, model: str, percent: int, canary_replicas: int
) -> str | None:
    """Wait (STATUS_WITHIN) until the status reports the split the route carries (after
    :func:`_canary_converged`): ``status.traffic``, the effective split in ``CanaryReady``'s message
    and, for the replicas router, ``TrafficSplitReady``'s. None once it does, else what it says."""
    ns, n = env.namespace, env.stable_replicas

    async def reported() -> bool:
        obj = await c.get(ISVC, name, ns)
        stable = obj["spec"]["modelUri"]
        t = _traffic(obj)
        got = {k: (v["percent"], v["readyReplicas"], v["modelUri"], v.get("version")) for k, v in t.items()}
        expected = {
            PREDICTOR: (100 - percent, n, stable, stable.rsplit("/", 1)[-1]),
            CANARY: (percent, canary_replicas, model, model.rsplit("/", 1)[-1]),
        }
        # a failed probe is retried; its message is what the timeout reports
        assert got == expected, f"status.traffic {got}, want {expected}"
        effective = (
            f"effective split: {100 - percent} % predictor ({n} ready), "
            f"{percent} % canary ({canary_replicas} ready)"
        )
        canary_ready = probes.condition(obj, "CanaryReady")
        assert canary_ready["message"].endswith(effective), f"CanaryReady {canary_ready['message']!r}"
        split_cond = probes.condition(obj, "TrafficSplitReady")
        assert split_cond.get("status") == "True", split_cond
        if env.router is base.Router.REPLICAS:
            total = n + canary_replicas
            message = (
                f"replicas router: candidate {canary_replicas} of {total} ready endpoints = {percent} % "
                f"(asked {percent} %)"
            )
            assert split_cond["message"] == message, f"TrafficSplitReady {split_cond['message']!r}"
        return True

    try:
        await wait.until(reported, timeout=STATUS_WITHIN, interval=0.05, what="the status reports the split")
    except TimeoutError as e:
        return f"{percent} %: {e}"
    return None


async def _one_component(c: rclient.Client, env: Env, name: str, model: str) -> dict[str, Any]:
    """Wait until only the predictor is left, serving ``model``, the route 100 % to it, the status
    without ``traffic``; return the InferenceService."""
    ns = env.namespace
    for res in (resources.DEPLOYMENT, resources.SERVICE, resources.HPA):
        gone = functools.partial(probes.absent, c, res, ns, f"{name}-{CANARY}")
        await _until(gone, f"{res.kind} {name}-canary gone")
    await _until(
        lambda: _deployment_available(c, env, f"{name}-{PREDICTOR}", model), f"{name}-predictor on {model}"
    )
    if env.router is base.Router.ISTIO:
        await _until(lambda: probes.absent(c, VIRTUAL_SERVICE, ns, name), "VirtualService gone")
    else:

        async def stable_only() -> bool:
            return await _weights(c, env, name) == {PREDICTOR: 100}

        await _until(stable_only, "route 100 % predictor")

    async def settled() -> dict[str, Any] | None:
        obj = await c.get(ISVC, name, ns)
        st = obj.get("status") or {}
        ok = (
            st.get("observedGeneration") == obj["metadata"]["generation"]
            and st.get("activeVersion") == model
            and "traffic" not in st
            and probes.condition(obj, "Ready").get("status") == "True"
        )
        return obj if ok else None

    obj: dict[str, Any] = await _until(settled, f"status: activeVersion {model}, no traffic")
    return obj


# -- 1. the lifecycle: canary 20 %, 50 %, promote, a second canary, roll back ----------------------


async def test_canary_split_follow_promote_and_rollback(admin_client: rclient.Client, env: Env) -> None:
    c, name, ns = admin_client, "life", env.namespace
    one = 1  # canary replicas at 20 %: ceil(2 * 0.2) for the weighted routers, 1 of 5 for replicas
    half = 4 if env.router is base.Router.REPLICAS else one  # ... and at 50 % (4 of 8)
    #: where the status did not report the split the route carries (asserted at the end, so that
    #: the rest of the lifecycle is checked too)
    unreported: list[str] = []

    async def reported(model: str, percent: int, canary_replicas: int) -> None:
        why = await _split_reported(c, env, name, model, percent, canary_replicas)
        if why is not None:
            unreported.append(why)

    async with _created(c, env, name, traffic={"canaryVersion": "v2", "canaryPercent": 20}):
        await _canary_converged(c, env, name, V2, 20, one)
        await reported(V2, 20, one)
        if env.router is base.Router.ISTIO:
            vs = await c.get(VIRTUAL_SERVICE, name, ns)
            assert vs["spec"]["hosts"] == [_fqdn(env, f"{name}-{PREDICTOR}")]
        if env.router is base.Router.REPLICAS:
            svc = await c.get(resources.SERVICE, f"{name}-{PREDICTOR}", ns)
            assert COMPONENT_LABEL not in svc["spec"]["selector"]
            assert svc["spec"]["selector"]["mlops.platform/inferenceservice"] == name

        # 50 %: the route follows (weighted: the weights; replicas: 4 canary of 8 ready endpoints)
        started = time.monotonic()
        await _patch(c, env, name, {"traffic": {"canaryVersion": "v2", "canaryPercent": 50}})
        if env.router in WEIGHTED:

            async def fifty_fifty() -> bool:
                return await _weights(c, env, name) == {PREDICTOR: 50, CANARY: 50}

            await wait.until(fifty_fifty, timeout=30, interval=0.02, what="route 50/50")
        else:

            async def half_of_endpoints() -> bool:
                return await _endpoint_share(c, env, name) == (4, 8)

            await wait.until(half_of_endpoints, timeout=30, interval=0.02, what="4 canary of 8 endpoints")
        followed = time.monotonic() - started
        print(f"\n[{env.router.value}] route at 50 % {followed:.2f}s after the patch")
        assert followed < FOLLOW_WITHIN
        await _canary_converged(c, env, name, V2, 50, half)
        await reported(V2, 50, half)

        # promote: spec.modelUri = the candidate, no traffic
        started = time.monotonic()
        await _patch(c, env, name, {"modelUri": V2, "traffic": None})
        obj = await _one_component(c, env, name, V2)
        print(f"[{env.router.value}] promoted in {time.monotonic() - started:.2f}s")
        assert probes.condition(obj, "CanaryReady") == {}
        url = f"http://{name}-{PREDICTOR}.{ns}.svc.cluster.local:8080"
        if env.router is base.Router.GATEWAY_API:
            url = f"http://{name}.{ns}.example.com"  # the HTTPRoute's hostname on the Gateway
        assert obj["status"]["url"] == url

        # a second canary, rolled back
        await _patch(c, env, name, {"traffic": {"canaryVersion": "v3", "canaryPercent": 20}})
        await _canary_converged(c, env, name, V3, 20, one)
        await reported(V3, 20, one)
        started = time.monotonic()
        await _patch(c, env, name, {"traffic": None})
        obj = await _one_component(c, env, name, V2)
        print(f"[{env.router.value}] rolled back in {time.monotonic() - started:.2f}s")
        route = await _route_object(c, env, name)
        if env.router is base.Router.ISTIO:
            assert route is None
        elif env.router is base.Router.GATEWAY_API:
            assert route is not None
            assert [b["name"] for b in route["spec"]["rules"][0]["backendRefs"]] == [f"{name}-{PREDICTOR}"]
            parent = route["spec"]["parentRefs"][0]
            assert (parent["namespace"], parent["name"]) == (ns, "gw")
        else:
            assert route is not None
            assert route["spec"]["selector"][COMPONENT_LABEL] == PREDICTOR
        dep = await c.get(resources.DEPLOYMENT, f"{name}-{PREDICTOR}", ns)
        envs = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert envs["MODEL_URI"] == V2
    assert unreported == [], "the status does not report the split the route carries: " + "; ".join(
        unreported
    )


# -- 2. no weight on a Service without ready endpoints, sampled ------------------------------------


@dataclasses.dataclass
class Sample:
    at: float
    took: float  # seconds the three reads took
    weights: dict[str, int]
    before: dict[str, int]  # ready endpoints read before the route
    after: dict[str, int]  # ... and after it
    phase: str

    def violations(self) -> list[str]:
        """A weight > 0 to a Service with no ready endpoint (on both reads around the route's, so the
        order of the reads cannot make one up)."""
        return [
            f"{k} weight {w} with 0 ready endpoints"
            for k, w in self.weights.items()
            if w > 0 and self.before.get(k, 0) == 0 and self.after.get(k, 0) == 0
        ]


class Sampler:
    """Reads the route and the EndpointSlices of both components every ~50 ms in the background."""

    def __init__(self, env: Env, name: str) -> None:
        self.c, self.env, self.name = env.sampling, env, name
        self.samples: list[Sample] = []
        #: what the test is doing (recorded with each sample)
        self.phase = "canary"
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        c, env, name = self.c, self.env, self.name
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            before = await _ready_endpoints(c, env, name)
            weights = await _weights(c, env, name)
            after = await _ready_endpoints(c, env, name)
            # no route object: the mesh sends everything to the predictor Service (istio); the
            # gateway API router always has one (None is then a weight to nothing, kept as such)
            if weights is None:
                weights = {PREDICTOR: 100} if env.router is base.Router.ISTIO else {"<none>": 100}
            took = loop.time() - started
            self.samples.append(Sample(time.monotonic(), took, weights, before, after, self.phase))
            # a sampling period, not a synchronisation
            await asyncio.sleep(max(0.0, SAMPLE_EVERY - (loop.time() - started)))

    def __enter__(self) -> Sampler:
        self._task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task  # a sampler that failed raises its error here

    def violations(self) -> list[tuple[float, Sample, list[str]]]:
        t0 = self.samples[0].at if self.samples else 0.0
        return [(s.at - t0, s, v) for s in self.samples if (v := s.violations())]

    async def more(self, n: int) -> None:
        """Wait until ``n`` more samples are taken."""
        want = len(self.samples) + n
        await wait.until(lambda: len(self.samples) >= want, timeout=30, what=f"{n} more samples")

    def count(self, pred: Callable[[Sample], bool]) -> int:
        return sum(1 for s in self.samples if pred(s))

    def summary(self) -> str:
        """Samples per phase, their mean duration, and the samples where one of the two endpoint
        reads around a weight > 0 saw none (not a violation: the reads straddled a change)."""
        phases = collections.Counter(s.phase for s in self.samples)
        took = sum(s.took for s in self.samples) / max(1, len(self.samples))
        straddled = collections.Counter(
            s.phase
            for s in self.samples
            if any(w > 0 and 0 in (s.before.get(k, 0), s.after.get(k, 0)) for k, w in s.weights.items())
        )
        return (
            f"{len(self.samples)} samples {dict(phases)}, {1000 * took:.0f} ms per sample; "
            f"one of two endpoint reads empty under a weight: {dict(straddled) or 0}"
        )


async def test_no_weight_on_a_service_without_ready_endpoints(admin_client: rclient.Client, env: Env) -> None:
    """Sampled from a running canary through its promotion, a new canary's entry into the route and
    its rollback (on kwok each transition takes well under a second: hence ~50 ms samples)."""
    c, name = admin_client, "smp"
    async with _created(c, env, name, traffic={"canaryVersion": "v2", "canaryPercent": 20}):
        await _canary_converged(c, env, name, V2, 20, 1)
        sampler = Sampler(env, name)
        with sampler:
            await sampler.more(3)  # of the running canary
            took: dict[str, float] = {}
            started = time.monotonic()
            sampler.phase = "promote"
            await _patch(c, env, name, {"modelUri": V2, "traffic": None})
            await _one_component(c, env, name, V2)
            took["promote"] = time.monotonic() - started
            sampler.phase = "promoted"
            await sampler.more(3)  # no late re-entry of the old candidate
            started = time.monotonic()
            sampler.phase = "ramp-up"
            await _patch(c, env, name, {"traffic": {"canaryVersion": "v3", "canaryPercent": 20}})
            await _canary_converged(c, env, name, V3, 20, 1)
            took["ramp-up"] = time.monotonic() - started
            started = time.monotonic()
            sampler.phase = "rollback"
            await _patch(c, env, name, {"traffic": None})
            await _one_component(c, env, name, V2)
            took["rollback"] = time.monotonic() - started
            sampler.phase = "rolled back"
            await sampler.more(3)
            await sampler.stop()
    total = len(sampler.samples)
    weighted = [s for s in sampler.samples if s.weights.get(CANARY, 0) > 0]
    durations = ", ".join(f"{p} {t:.2f}s" for p, t in took.items())
    print(f"\n[{env.router.value}] {durations}; {sampler.summary()}; {len(weighted)} with a canary weight")
    bad = sampler.violations()
    assert bad == [], f"{len(bad)} of {total} samples route to a Service without ready endpoints: {bad[:5]}"
    assert total > 10
    # the sampler saw both states, so it could have caught a bad transition
    assert weighted
    assert sampler.count(lambda s: not s.weights.get(CANARY)) > 0


# -- 3. chaos: the candidate's pods crash ----------------------------------------------------------


async def test_a_crashing_candidate_never_gets_traffic(admin_client: rclient.Client, env: Env) -> None:
    c, name, ns = admin_client, "crashy", env.namespace
    stage = stages.crashloop_stage(f"crash-canary-{ns}", ns, COMPONENT_LABEL, CANARY)
    await c.create(STAGE, stage)
    try:
        async with _created(c, env, name):
            await _cond(c, env, name, "Ready", "True")
            sampler = Sampler(env, name)
            with sampler:
                await _patch(c, env, name, {"traffic": {"canaryVersion": "v2", "canaryPercent": 50}})
                obj = await _cond(c, env, name, "CanaryReady", "False", "CrashLoopBackOff")
                turned_false = len(sampler.samples)
                await asyncio.sleep(CRASH_WATCH)  # a measurement window, not a synchronisation
                await sampler.stop()
            cond = probes.condition(obj, "CanaryReady")
            assert "CrashLoopBackOff" in cond["message"], cond
            assert cond["message"].endswith("the candidate gets no traffic"), cond
            assert probes.condition(obj, "Ready")["status"] == "True", probes.condition(obj, "Ready")
            obj = await c.get(ISVC, name, ns)
            t = _traffic(obj)
            assert t[CANARY]["percent"] == 0 and t[PREDICTOR]["percent"] == 100, t
            assert t[CANARY]["readyReplicas"] == 0
            assert probes.condition(obj, "Ready")["status"] == "True"
            pods = await c.list(resources.POD, ns, label_selector=f"{COMPONENT_LABEL}={CANARY}")
            assert pods["items"], "no canary pod was created"
    finally:
        await c.delete(STAGE, stage["metadata"]["name"])
    given = [s for s in sampler.samples if s.weights.get(CANARY, 0) > 0]
    print(
        f"\n[{env.router.value}] crashing candidate: {sampler.summary()}, "
        f"{len(sampler.samples) - turned_false} after CanaryReady=False, {len(given)} with a canary weight"
    )
    assert len(sampler.samples) - turned_false > 10
    assert given == [], given[:3]


# -- 4. a converged canary costs no write ----------------------------------------------------------


async def test_steady_state_with_a_canary_makes_no_writes(admin_client: rclient.Client, env: Env) -> None:
    c, name = admin_client, "calm"
    async with _created(c, env, name, traffic={"canaryVersion": "v2", "canaryPercent": 20}):
        await _canary_converged(c, env, name, V2, 20, 1)
        unreported = await _split_reported(c, env, name, V2, 20, 1)
        queue = env.manager.controllers[0].queue
        await wait.until(queue.idle, what="queue idle")
        status_before = (await c.get(ISVC, name, env.namespace)).get("status") or {}
        with requests.recording(env.client) as recorder:
            await asyncio.sleep(WINDOW)  # a measurement window, not a synchronisation
        # this object's writes (the tests of a router share the namespace: an earlier test's
        # object may still be going away)
        writes = recorder.writes(env.namespace, names=requests.owned_by(name))
        others = recorder.writes() - writes
        print(
            f"\n[{env.router.value}] {len(recorder.records)} requests in {WINDOW:.0f}s with a converged "
            f"canary, {writes.total()} writes {sorted(writes)}; elsewhere {sorted(others)}"
        )
        if writes:  # say what the write changed, and whether the status had lagged the route
            status_after = (await c.get(ISVC, name, env.namespace)).get("status") or {}
            changed = {
                k: (status_before.get(k), status_after.get(k))
                for k in sorted(set(status_before) | set(status_after))
                if status_before.get(k) != status_after.get(k)
            }
            every = [(r.verb, r.resource, r.name, r.code) for r in recorder.records]
            raise AssertionError(
                f"writes {sorted(writes)}; the status changed {changed}; unreported: {unreported}; "
                f"the window's requests: {every}"
            )
        # converged means the status too (checked after the window, so that the count is known)
        assert unreported is None, unreported
