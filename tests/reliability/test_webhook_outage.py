"""Scenario 8, conversion webhook outage: the session's conversion webhook process is stopped
(:func:`webhook.paused`: the API server's calls to it are refused) while clients and the operator
work, then started again; clients get clear errors, nothing is lost or half-written, and everything
converges.

The CRD serves v1 (the storage version, the hub: every object is stored as v1, asserted from etcd),
v1beta1 and v1alpha1; the operator reads and writes v1 only (its controller's primary resource is
asserted to be the storage version). It runs in this process with a client of its own. Before the
outages: InferenceServices written in v1alpha1 (``alpha-*``: their field managers are v1alpha1
ones) and in v1 (``hub-*``), converged, their specs read in both versions (the snapshot).

What one outage checks, as the API server really behaves (found out on the local cluster, 1.36):

- non-storage versions: GET in v1alpha1 and v1beta1, a consistent LIST in v1alpha1 after any
  change in the namespace, and every write in v1alpha1 (create, patch, delete) answer 500 with
  ``conversion webhook for mlops.platform/... failed: ...`` (asserted: the code and that the message
  names the conversion webhook). None of these writes is applied: the refused create is absent,
  the refused patch changed nothing, the refused delete deleted nothing (checked after the outage).
  A LIST with ``resourceVersion=0`` is served from the version's watch cache, which cannot follow
  changes it cannot convert: it answers 200 with the state from before the outage began (its
  resourceVersion is asserted not to be newer), i.e. stale, never made up. When the API server
  has rebuilt the resource's storage shortly before (any CRD update, e.g. the re-installed CRD of
  the previous outage's recovery), the version's watch cache cannot initialize without the
  webhook: its LISTs wait (about 60 s measured) and answer 429 ``storage is (re)initializing:
  failed to list ...: conversion webhook ... failed``, which counts as a clear refusal too; after
  the webhook is back such a cache retries only after its back-off (about 30 s measured: the
  convergence time of those outages, whose audit lists in v1alpha1);
- the storage version: GET and LIST of every object work, specs identical to the snapshot; a
  create in v1 works; a merge patch in v1 works, but the API server cannot convert the other
  versions' managedFields and drops them (asserted: the v1alpha1 entries are gone: server-side
  apply ownership is lost, the spec is not); a server-side apply in v1 to an object that has
  v1alpha1 field managers is refused (500, naming the webhook) for the same reason;
- the operator keeps working on what needs no conversion: the InferenceService created in v1 during
  the outage becomes Ready, a v1 spec change is rolled out (Deployment and Ready status at the new
  generation), a deleted Deployment of a v1alpha1-written object is recreated; its status apply to
  that object is refused (it has v1alpha1 field managers) and retried: the operator's only failed
  requests during the outage are those status applies (asserted);
- after the webhook is back: :func:`reliability.converge` (listing in v1alpha1), every object's
  spec identical to the snapshot in v1alpha1 and v1 but for the changes made in v1 during the
  outage, the operator still the same, ready, its queue drained.

Repetitions: ``OUTAGES``. Run with ``-s`` for the figures of every outage.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from typing import Any

from mlops_platform import api
from mlops_platform.api import crd
from mlops_platform.controllers.inferenceservice import labels, reconciler
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import (
    conversionload,
    etcd,
    isvc,
    operator,
    probes,
    reliability,
    requests,
    wait,
    webhook,
)
from mlops_platform.testing.scenario import Scenario, model_uri, one_replica

ALPHA = isvc.RESOURCE  # v1alpha1
BETA = conversionload.BETA  # v1beta1
HUB = api.RESOURCE  # v1: the storage version, which the operator reads
OBJECTS = reliability.scale(6, 2)  # of each version, before the first outage
OUTAGES = reliability.repetitions(3, 1)
#: acceptance bounds (the waits' own timeouts are longer): the operator's work during an outage
#: (a new InferenceService Ready, a rollout), and the convergence after the webhook is back
DURING_WITHIN = 30.0
CONVERGE_WITHIN = 60.0
TIMEOUT = 120.0
WEBHOOK_ERROR = "conversion webhook for mlops.platform/"
#: the status codes of every refusal, all outages
codes: collections.Counter[int] = collections.Counter()


def _hub(name: str, uri: str) -> dict[str, Any]:
    return {
        "apiVersion": HUB.api_version,
        "kind": HUB.kind,
        "metadata": {"name": name},
        "spec": {"predictor": {"model": {"uri": uri}, "runtime": "torchserve"}},
    }


@dataclasses.dataclass
class Outage:
    """One outage's figures."""

    seconds: float  # the webhook down
    refused: int  # client requests answered 500 naming the webhook
    served: int  # client requests in v1 answered 2xx
    stale_list: bool  # a v1alpha1 LIST rv=0 answered from the stale watch cache (else refused)
    operator_refused: int  # the operator's status applies refused
    created_ready_s: float  # a v1 InferenceService created during the outage: Ready after
    rollout_s: float  # a v1 spec change during the outage: rolled out and reported after
    converge_s: float  # webhook back -> converged


async def _error_of(call: Any) -> rclient.ApiError | None:
    """The API server's refusal of ``call``, or None when it succeeded."""
    try:
        await call
    except rclient.ApiError as e:
        return e
    return None


def _names_the_webhook(error: rclient.ApiError) -> bool:
    """A 500 naming the conversion webhook, or a 429 of a version's watch cache that cannot
    (re)initialize because its list needs the webhook (after a CRD update the API server rebuilds
    the resource's storage; ``storage is (re)initializing: failed to list ...: conversion webhook
    ... failed``)."""
    named = WEBHOOK_ERROR in error.message and "failed" in error.message
    return named and (error.status == 500 or (error.status == 429 and "initializing" in error.message))


async def _refused(what: str, call: Any, tally: collections.Counter[str]) -> None:
    """``call`` must be refused with a message naming the conversion webhook."""
    error = await _error_of(call)
    assert error is not None, f"{what}: answered 2xx while the conversion webhook is down"
    assert _names_the_webhook(error), f"{what}: {error.status} {error.message}"
    tally[what] += 1
    codes[error.status] += 1


async def _specs(c: rclient.Client, ns: str, res: rclient.Resource) -> dict[str, Any]:
    return {o["metadata"]["name"]: o["spec"] for o in (await c.list(res, ns))["items"]}


async def _rolled_out(c: rclient.Client, ns: str, name: str, uri: str) -> bool:
    dep = await probes.get_or_none(c, resources.DEPLOYMENT, ns, f"{name}-predictor")
    if dep is None or (dep["metadata"].get("annotations") or {}).get(labels.MODEL_URI_ANNOTATION) != uri:
        return False
    obj = await c.get(HUB, name, ns)
    current = (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
    return current and probes.condition(obj, "Ready").get("status") == "True"


def _managers(obj: dict[str, Any]) -> set[str]:
    return {str(m.get("apiVersion")) for m in obj["metadata"].get("managedFields") or []}


async def _outage(
    c: rclient.Client,
    ns: str,
    mgr: Any,
    recorded: requests.Recorder,
    r: int,
    expected: dict[str, reliability.Expected],
    snapshot: dict[str, dict[str, Any]],
) -> Outage:
    """Outage ``r``: the webhook down, the checks above, the webhook back, convergence."""
    tally: collections.Counter[str] = collections.Counter()
    served = 0
    await c.create(ALPHA, one_replica(f"mf-{r}", modelUri=model_uri(f"mf-{r}", 0)), ns)  # v1alpha1 managers
    expected[f"mf-{r}"] = reliability.Expected(model_uri=model_uri(f"mf-{r}", 0))
    await wait.until(
        lambda: _rolled_out(c, ns, f"mf-{r}", model_uri(f"mf-{r}", 0)), timeout=TIMEOUT, what=f"mf-{r}"
    )
    seen = len(recorded.records)
    async with webhook.paused(c):
        down = time.monotonic()
        down_rv = int((await c.list(HUB, ns))["metadata"]["resourceVersion"])
        # non-storage versions: refused, naming the webhook
        await _refused("get v1alpha1", c.get(ALPHA, "alpha-0", ns), tally)
        await _refused("get v1beta1", c.get(BETA, "alpha-0", ns), tally)
        await _refused(
            "create v1alpha1",
            c.create(ALPHA, one_replica(f"refused-{r}", modelUri=model_uri("x", r)), ns),
            tally,
        )
        await _refused(
            "patch v1alpha1",
            c.patch(
                ALPHA, "alpha-0", {"spec": {"modelUri": model_uri("alpha-0", f"refused-{r}")}}, namespace=ns
            ),
            tally,
        )
        await _refused("delete v1alpha1", c.delete(ALPHA, "hub-0", ns), tally)
        # the storage version: reads need no conversion
        live = (await c.list(HUB, ns))["items"]
        served += 1
        for obj in live:
            name = obj["metadata"]["name"]
            if name in snapshot:
                assert obj["spec"] == snapshot[name]["v1"], f"{name}: v1 spec changed during the outage"
            assert (await c.get(HUB, name, ns))["spec"] == obj["spec"]
            served += 1
        # ... and so do writes, but for managedFields of other versions
        uri = model_uri(f"during-{r}", 0)
        created_at = time.monotonic()
        await c.create(HUB, _hub(f"during-{r}", uri), ns)
        expected[f"during-{r}"] = reliability.Expected(model_uri=uri)
        roll_uri = model_uri("hub-1", f"during-{r}")
        rolled_at = time.monotonic()
        await c.patch(HUB, "hub-1", {"spec": {"predictor": {"model": {"uri": roll_uri}}}}, namespace=ns)
        expected["hub-1"] = reliability.Expected(model_uri=roll_uri)
        mf_uri = model_uri(f"mf-{r}", 1)
        assert ALPHA.api_version in _managers(await c.get(HUB, f"mf-{r}", ns))
        patched = await c.patch(
            HUB, f"mf-{r}", {"spec": {"predictor": {"model": {"uri": mf_uri}}}}, namespace=ns
        )
        assert ALPHA.api_version not in _managers(patched), (
            "managedFields of v1alpha1 kept: the server converted?"
        )
        expected[f"mf-{r}"] = reliability.Expected(model_uri=mf_uri)
        served += 3
        apply = {
            "apiVersion": HUB.api_version,
            "kind": HUB.kind,
            "metadata": {"name": "alpha-1", "namespace": ns},
        }
        await _refused(
            "apply v1 (v1alpha1 managers)",
            c.apply(
                HUB, {**apply, "spec": {"predictor": {"port": 8080}}}, field_manager="reliability-outage"
            ),
            tally,
        )
        # the operator: its v1 work goes on; a child deleted under an object with v1alpha1 managers
        await c.delete(resources.DEPLOYMENT, "alpha-1-predictor", ns)
        served += 1
        await wait.until(
            lambda: _rolled_out(c, ns, f"during-{r}", uri), timeout=TIMEOUT, what=f"during-{r} Ready"
        )
        created_ready_s = time.monotonic() - created_at
        await wait.until(
            lambda: _rolled_out(c, ns, "hub-1", roll_uri), timeout=TIMEOUT, what="hub-1 rolled out"
        )
        rollout_s = time.monotonic() - rolled_at
        await wait.until(
            lambda: probes.exists(c, resources.DEPLOYMENT, ns, "alpha-1-predictor"),
            timeout=TIMEOUT,
            what="alpha-1's Deployment recreated",
        )
        # a consistent LIST in v1alpha1 after changes: refused; rv=0: the stale watch cache, or refused
        await _refused("list v1alpha1", c.list(ALPHA, ns), tally)
        stale = False
        try:
            cached, error = await c.list(ALPHA, ns, resource_version="0"), None
        except rclient.ApiError as e:
            cached, error = None, e
        if error is not None:
            assert _names_the_webhook(error), f"list v1alpha1 rv=0: {error}"
            tally["list v1alpha1 rv=0"] += 1
            codes[error.status] += 1
        else:
            assert cached is not None
            stale = True
            got = int(cached["metadata"]["resourceVersion"])
            assert got <= down_rv, (
                f"a v1alpha1 list (watch cache) at {got}, after the webhook went ({down_rv})"
            )
        assert reconciler.ISVC == HUB and mgr.is_ready()
        up_at = time.monotonic()
    seconds = up_at - down
    recovered = time.monotonic()
    # the operator's failures during the outage: only the status applies to v1alpha1-managed objects
    during = recorded.records[seen:]
    failed = collections.Counter(f"{x.verb} {x.resource} {x.code}" for x in during if x.code >= 400)
    others = {k: n for k, n in failed.items() if k != "patch inferenceservices.mlops.platform/status 500"}
    assert not others, f"outage {r}: the operator's requests failed otherwise: {dict(failed)}"
    converged = await reliability.converge(c, ns, expected, timeout=TIMEOUT, since=recovered)
    assert converged.audit.ok, f"outage {r}: {converged.audit.summary()}"
    # nothing refused was applied, nothing else changed
    assert await probes.absent(c, HUB, ns, f"refused-{r}"), f"refused-{r}: the refused create was stored"
    alpha_specs, hub_specs = await _specs(c, ns, ALPHA), await _specs(c, ns, HUB)
    for name, want in snapshot.items():
        if name == "hub-1" or name.startswith(("mf-", "during-")):
            continue
        assert alpha_specs.get(name) == want["v1alpha1"], f"outage {r}: {name} changed (v1alpha1)"
        assert hub_specs.get(name) == want["v1"], f"outage {r}: {name} changed (v1)"
    assert hub_specs["hub-1"]["predictor"]["model"]["uri"] == roll_uri
    assert hub_specs[f"mf-{r}"]["predictor"]["model"]["uri"] == mf_uri
    await wait.until(mgr.controllers[0].queue.idle, timeout=TIMEOUT, what="operator queue idle")
    for name in ("hub-1", f"mf-{r}", f"during-{r}"):
        snapshot[name] = {"v1alpha1": alpha_specs[name], "v1": hub_specs[name]}
    op_refused = failed.get("patch inferenceservices.mlops.platform/status 500", 0)
    return Outage(
        seconds,
        sum(tally.values()),
        served,
        stale,
        op_refused,
        created_ready_s,
        rollout_s,
        converged.seconds,
    )


async def test_conversion_webhook_outage(scenario: Scenario, local_cluster_name: str) -> None:
    c, ns = scenario.client, scenario.namespace
    storage = next(v.name for v in crd.VERSIONS if v.storage)
    assert reconciler.ISVC.version == storage == HUB.version, "the operator does not read the storage version"
    expected: dict[str, reliability.Expected] = {}
    async with (
        rclient.Client.from_kubeconfig(scenario.kubeconfig) as oc,
        operator.running(oc, namespace=ns) as mgr,
    ):
        for i in range(OBJECTS):
            await c.create(ALPHA, one_replica(f"alpha-{i}", modelUri=model_uri(f"alpha-{i}", 0)), ns)
            await c.create(HUB, _hub(f"hub-{i}", model_uri(f"hub-{i}", 0)), ns)
            expected |= {
                n: reliability.Expected(model_uri=model_uri(n, 0)) for n in (f"alpha-{i}", f"hub-{i}")
            }
        first = await reliability.converge(c, ns, expected, timeout=TIMEOUT)
        assert first.audit.ok, f"before the outages: {first.audit.summary()}"
        stored = await asyncio.to_thread(etcd.stored_api_versions, local_cluster_name, HUB, ns)
        assert set(stored.values()) == {HUB.api_version}, f"not every object is stored as v1: {stored}"
        alpha_specs, hub_specs = await _specs(c, ns, ALPHA), await _specs(c, ns, HUB)
        snapshot = {n: {"v1alpha1": alpha_specs[n], "v1": hub_specs[n]} for n in expected}
        outages: list[Outage] = []
        with requests.recording(oc) as recorded:
            for r in range(1, OUTAGES + 1):
                outage = await _outage(c, ns, mgr, recorded, r, expected, snapshot)
                outages.append(outage)
                print(f"\noutage {r}: {outage}")
                assert outage.created_ready_s <= DURING_WITHIN, f"outage {r}: {outage}"
                assert outage.rollout_s <= DURING_WITHIN, f"outage {r}: {outage}"
                assert outage.converge_s <= CONVERGE_WITHIN, f"outage {r}: {outage}"
        final = await reliability.converge(c, ns, expected, timeout=TIMEOUT)
        assert final.audit.ok, final.audit.summary()
        assert mgr.is_ready()
    worst = max(o.converge_s for o in outages)
    refused = sum(o.refused for o in outages)
    op_refused = sum(o.operator_refused for o in outages)
    print(
        f"webhook outage: {OUTAGES} outages ({min(o.seconds for o in outages):.1f}-"
        f"{max(o.seconds for o in outages):.1f} s), {refused} client requests refused naming the webhook, "
        f"{sum(o.served for o in outages)} v1 requests served (refusals by code: {dict(codes)}), "
        f"{op_refused} operator status applies "
        f"refused and retried; new v1 object Ready within {max(o.created_ready_s for o in outages):.1f} s "
        f"and a v1 rollout within {max(o.rollout_s for o in outages):.1f} s during an outage; converged "
        f"{worst:.1f} s after the webhook returned"
    )
    scenario.report(
        "8. Conversion webhook outage",
        OUTAGES,
        f"{OUTAGES} outages of the conversion webhook ({max(o.seconds for o in outages):.0f} s each at most)",
        final,
        f"{refused} requests needing a conversion refused naming the webhook ({dict(codes)}), none "
        "applied; v1 reads and writes served, the operator kept serving v1 changes (Ready within "
        f"{max(o.created_ready_s for o in outages):.1f} s); its {op_refused} status applies to "
        "objects with v1alpha1 field managers refused and retried; v1 merge patches drop those "
        "managers' managedFields (API server)",
        max_converge_s=worst,
    )
