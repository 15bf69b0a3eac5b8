"""Scenario 5, conflicts: other writers edit the InferenceServices and the children the operator owns
while it reconciles them, and the operator converges without losing a spec update and without a
write storm.

The operator runs in this process with a client of its own (every request it makes is recorded).
Concurrent "other writers" use the admin client, each with a field manager of its own:

- spec writers: GET + PUT with the read resourceVersion (optimistic concurrency), retrying their own
  409s; the last modelUri written to each object (the highest resourceVersion a PUT answered with)
  must be what its Deployment carries at the end;
- a metadata writer (a label and an annotation on the CR, GET + PUT) and a status writer (the Ready
  condition rewritten through the status subresource, GET + PUT): both make the spec writers' reads
  stale, and the status writer says something the operator did not;
- child editors: the Deployment's container image (a merge patch, and a forced server-side apply
  that takes the field away from the operator), one of its labels removed, its replicas scaled, a
  port added to the Service (GET + PUT), a child deleted.

After the writers stop: :func:`reliability.converge` clean, every child back to what the operator
wants (the fields the editors touched, compared with a snapshot taken before them), no status that
went back to an older generation, and the operator's writes bounded by what the writers did
(``WRITES_PER_CHANGE`` x (foreign writes + objects)); once its queue is idle, it writes nothing.
Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
import time
from typing import Any

from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import deployment
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import isvc, operator, reliability, requests, wait
from mlops_platform.testing.scenario import Scenario, expected, model_uri, one_replica

ISVC = isvc.RESOURCE  # v1alpha1 objects: every write of the writers goes through the conversion webhook
OBJECTS = reliability.scale(20, 5)
SECONDS = reliability.scale(60, 8)
SPEC_WRITERS, CHILD_EDITORS = 2, 2
#: each writer's pause between two of its writes (load pacing, not synchronisation): ~20 foreign
#: writes per second in all, each of which makes the operator reconcile
PACE = 0.25
#: acceptance bound of the convergence after the writers stop (the wait's own timeout is longer)
CONVERGE_WITHIN = 45.0
CONVERGE_TIMEOUT = 120.0
#: what one foreign write may cost the operator at most: the child write repairing it, the overwrite
#: of what an apply cannot take back, its Event, and the status writes of the rollout it causes
WRITES_PER_CHANGE = 5
#: a quiet window after convergence: the operator writes nothing while nobody else does
QUIET_SECONDS = 2.0
INTRUDER = "reliability-intruder"  # the field managers of the other writers: f"{INTRUDER}-<what>"


@dataclasses.dataclass
class Tally:
    """What the other writers did."""

    writes: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    conflicts: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    #: per object, (resourceVersion, modelUri) of every spec PUT that succeeded
    specs: dict[str, list[tuple[int, str]]] = dataclasses.field(
        default_factory=lambda: collections.defaultdict(list)
    )

    def last_uri(self, name: str) -> str | None:
        written = self.specs.get(name)
        return max(written)[1] if written else None


async def _optimistic(
    c: rclient.Client,
    res: rclient.Resource,
    ns: str,
    name: str,
    change: Any,
    tally: Tally,
    what: str,
    *,
    subresource: str | None = None,
) -> dict[str, Any] | None:
    """GET, ``change(obj)`` in place, PUT with the read resourceVersion; a 409 is counted and the
    whole read-modify-write done again. None if the object is gone."""
    while True:
        try:
            obj = await c.get(res, name, ns)
            change(obj)
            answer = await c.replace(res, obj, subresource=subresource)
        except rclient.ApiError as e:
            if e.status == 409:
                tally.conflicts[what] += 1
                continue
            if e.not_found:
                return None
            raise
        tally.writes[what] += 1
        return answer


async def _spec_writer(
    c: rclient.Client, ns: str, names: list[str], k: int, until: float, tally: Tally
) -> None:
    rng, i = random.Random(k), 0
    while time.monotonic() < until:
        name, i = rng.choice(names), i + 1
        uri = model_uri(name, f"w{k}-{i}")

        def change(obj: dict[str, Any], uri: str = uri) -> None:
            obj["spec"]["modelUri"] = uri

        answer = await _optimistic(c, ISVC, ns, name, change, tally, "spec")
        assert answer is not None, f"{name} is gone"
        tally.specs[name].append((int(answer["metadata"]["resourceVersion"]), uri))
        await asyncio.sleep(PACE)


async def _cr_writer(c: rclient.Client, ns: str, names: list[str], until: float, tally: Tally) -> None:
    """Labels and annotations of the CR, and its Ready condition through the status subresource."""
    rng, i = random.Random(100), 0
    while time.monotonic() < until:
        name, i = rng.choice(names), i + 1

        def touch(obj: dict[str, Any], i: int = i) -> None:
            meta = obj["metadata"]
            meta.setdefault("labels", {})[f"{INTRUDER}/touch"] = str(i)
            meta.setdefault("annotations", {})[f"{INTRUDER}/note"] = f"edit {i}"

        def stomp(obj: dict[str, Any], i: int = i) -> None:
            for cond in (obj.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "Ready":
                    cond.update(status="False", reason="ForeignEdit", message=f"written by a test ({i})")

        if i % 2:
            await _optimistic(c, ISVC, ns, name, touch, tally, "cr-metadata")
        else:
            await _optimistic(c, ISVC, ns, name, stomp, tally, "cr-status", subresource="status")
        await asyncio.sleep(PACE)


async def _child_editor(
    c: rclient.Client, ns: str, names: list[str], k: int, until: float, tally: Tally
) -> None:
    rng, i = random.Random(200 + k), 0
    while time.monotonic() < until:
        name, i = rng.choice(names), i + 1
        child = f"{name}{labels.PREDICTOR_SUFFIX}"
        action = rng.choice(("image", "image-force", "label", "scale", "port", "delete"))
        manager = f"{INTRUDER}-{action}"
        try:
            if action == "image":
                patch = {"spec": {"template": {"spec": {"containers": [
                    {"name": deployment.CONTAINER, "image": f"intruder:{i}"}
                ]}}}}  # fmt: skip
                await c.patch(
                    resources.DEPLOYMENT,
                    child,
                    patch,
                    namespace=ns,
                    patch_type="strategic",
                    field_manager=manager,
                )
            elif action == "image-force":  # takes the field away from the operator's manager
                body = {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "metadata": {"name": child, "namespace": ns},
                    "spec": {"template": {"spec": {"containers": [
                        {"name": deployment.CONTAINER, "image": f"intruder-forced:{i}"}
                    ]}}},
                }  # fmt: skip
                await c.apply(resources.DEPLOYMENT, body, field_manager=manager, force=True)
            elif action == "label":
                key = rng.choice((labels.K8S_PART_OF, labels.FRAMEWORK, labels.K8S_MANAGED_BY))
                await c.patch(
                    resources.DEPLOYMENT, child, {"metadata": {"labels": {key: None}}}, namespace=ns,
                    field_manager=manager,
                )  # fmt: skip
            elif action == "scale":
                await c.patch(
                    resources.DEPLOYMENT,
                    child,
                    {"spec": {"replicas": 3}},
                    namespace=ns,
                    field_manager=manager,
                )
            elif action == "port":

                def add_port(svc: dict[str, Any], i: int = i) -> None:
                    svc["spec"]["ports"].append(
                        {
                            "name": f"intruder-{i}",
                            "port": 20000 + i,
                            "targetPort": 20000 + i,
                            "protocol": "TCP",
                        }
                    )

                await _optimistic(c, resources.SERVICE, ns, child, add_port, tally, "child")
                await asyncio.sleep(PACE)
                continue  # counted by _optimistic
            else:
                res = rng.choice((resources.DEPLOYMENT, resources.SERVICE))
                await c.delete(res, child, ns, propagation_policy="Background")
        except rclient.ApiError as e:
            # deleted a moment ago by an editor, the operator re-creating it: a patch finds nothing
            # (404), and the forced apply, which creates what is absent, creates a Deployment of
            # only its image and is refused as one without a selector (422)
            refused = action == "image-force" and e.status == 422 and "spec.selector" in e.message
            if not (e.not_found or refused):
                raise
        else:
            tally.writes["child"] += 1
        await asyncio.sleep(PACE)


def _fields(dep: dict[str, Any], svc: dict[str, Any]) -> dict[str, Any]:
    """What the child editors touch of the operator's children (besides the model, which follows the
    spec writers)."""
    tpl = dep["spec"]["template"]
    container = next(x for x in tpl["spec"]["containers"] if x["name"] == deployment.CONTAINER)
    return {
        "deployment labels": dep["metadata"].get("labels"),
        "pod labels": tpl["metadata"].get("labels"),
        "replicas": dep["spec"].get("replicas"),
        "image": container["image"],
        "service labels": svc["metadata"].get("labels"),
        "ports": sorted((p["name"], p["port"], str(p.get("targetPort"))) for p in svc["spec"]["ports"]),
    }


async def _children_fields(c: rclient.Client, ns: str, names: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for name in names:
        child = f"{name}{labels.PREDICTOR_SUFFIX}"
        dep = await c.get(resources.DEPLOYMENT, child, ns)
        svc = await c.get(resources.SERVICE, child, ns)
        out[name] = _fields(dep, svc)
    return out


async def _rolled_out(c: rclient.Client, ns: str, final: dict[str, reliability.Expected]) -> bool:
    """Every Deployment's rollout is complete (no pod of an older template left) and every status
    says so (``activeVersion``: the model rolled out): nothing is left for anyone to report."""
    for name, want in final.items():
        dep = await c.get(resources.DEPLOYMENT, f"{name}{labels.PREDICTOR_SUFFIX}", ns)
        spec, st = dep["spec"], dep.get("status") or {}
        counts = {
            st.get(k) or 0 for k in ("replicas", "updatedReplicas", "availableReplicas", "readyReplicas")
        }
        if (st.get("observedGeneration") or 0) < dep["metadata"]["generation"] or counts != {
            spec["replicas"]
        }:
            return False
        if st.get("terminatingReplicas"):
            return False
        obj = await c.get(ISVC, name, ns)
        if (obj.get("status") or {}).get("activeVersion") != want.model_uri:
            return False
    return True


async def test_conflicts(scenario: Scenario) -> None:
    ns, c = scenario.namespace, scenario.client
    names = [f"conflict-{i}" for i in range(OBJECTS)]
    async with (
        rclient.Client.from_kubeconfig(scenario.kubeconfig) as oc,
        operator.running(oc, namespace=ns) as mgr,
    ):
        for name in names:
            await c.create(ISVC, one_replica(name, modelUri=model_uri(name, "initial")), ns)
        initial = expected({n: model_uri(n, "initial") for n in names})
        first = await reliability.converge(c, ns, initial, timeout=CONVERGE_TIMEOUT)
        assert first.audit.ok, f"before the writers: {first.audit.summary()}"
        before = await _children_fields(c, ns, names)

        tally = Tally()
        async with reliability.status_history(c, ns) as history:
            with requests.recording(oc) as recorded:
                started = time.monotonic()
                until = started + SECONDS
                await asyncio.gather(
                    *(_spec_writer(c, ns, names, k, until, tally) for k in range(SPEC_WRITERS)),
                    _cr_writer(c, ns, names, until, tally),
                    *(_child_editor(c, ns, names, k, until, tally) for k in range(CHILD_EDITORS)),
                )
                ended = time.monotonic()
                final = expected({n: tally.last_uri(n) or model_uri(n, "initial") for n in names})
                converged = await reliability.converge(c, ns, final, timeout=CONVERGE_TIMEOUT, since=ended)
                converged_at = time.monotonic()
                after = await _children_fields(c, ns, names)
                await wait.until(
                    lambda: _rolled_out(c, ns, final), timeout=60, what="rollouts complete and reported"
                )
                await wait.until(mgr.controllers[0].queue.idle, timeout=60, what="operator queue idle")
                window = len(recorded.records)
                await asyncio.sleep(QUIET_SECONDS)  # a measurement window, not a synchronisation
                quiet = requests.Recorder(recorded.records[window:]).writes(ns)
            regressions = history.regressions()

    contention = recorded.records[:window]
    op_writes = sum(requests.Recorder(contention).writes(ns).values())
    op_events = sum(
        n for (verb, res, _), n in requests.Recorder(contention).writes(ns).items() if "event" in res
    )
    op_conflicts = sum(1 for r in contention if r.code == 409)
    foreign = sum(tally.writes.values())
    minutes = (converged_at - started) / 60
    per_minute = op_writes / minutes
    print(
        f"\nconflicts: {OBJECTS} objects, {SECONDS} s of contention: {foreign} foreign writes "
        f"({dict(tally.writes)}), 409s seen by the writers {dict(tally.conflicts)}, by the operator "
        f"{op_conflicts}; operator writes {op_writes} ({op_events} Events) in {minutes * 60:.1f} s = "
        f"{per_minute:.0f}/min ({op_writes / max(foreign, 1):.2f} per foreign write); converged "
        f"{converged.seconds:.1f} s after the writers stopped; {history.events} status events watched"
    )
    assert converged.audit.ok, converged.audit.summary()
    assert converged.seconds <= CONVERGE_WITHIN, f"converged in {converged.seconds:.1f} s"
    assert tally.writes["spec"] > 0 and sum(tally.conflicts.values()) > 0, (tally.writes, tally.conflicts)
    changed = {n: (before[n], after[n]) for n in names if before[n] != after[n]}
    assert not changed, f"children not restored (before, after): {changed}"
    assert not regressions, regressions
    bound = WRITES_PER_CHANGE * (foreign + OBJECTS)
    assert op_writes <= bound, f"{op_writes} operator writes for {foreign} foreign writes (bound {bound})"
    assert not quiet, f"the operator wrote while nobody else did: {quiet}"
    scenario.report(
        "5. Conflicts",
        1,
        f"{foreign} foreign writes in {SECONDS} s ({sum(tally.conflicts.values())} 409s seen by "
        f"the writers, {op_conflicts} by the operator)",
        converged,
        f"operator: {op_writes} writes, {per_minute:.0f}/min, {op_writes / max(foreign, 1):.2f} per "
        f"foreign write (bound {WRITES_PER_CHANGE} x ({foreign} foreign writes + {OBJECTS} objects) "
        f"= {bound})",
    )
