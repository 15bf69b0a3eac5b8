"""Scenario 9, hostile and random input: hypothesis draws invalid manifests, which the real API
server must refuse naming the offending field, and valid random manifests, which the operator must
bring to a stable state whose status explains itself, without crashing or wedging.

- Invalid (:func:`manifests.invalid`, every served version): one field of a valid object made wrong
  (wrong JSON types, numbers out of range, bad quantities, strings and maps far over their bounds
  up to close to the API server's 3 MiB request limit, unknown fields, bad model URIs and
  endpoints, unicode tricks in names, labels and annotations, broken cross-field rules, the canary
  analysis' bounds and CEL rules). Each is
  POSTed with ``fieldValidation=Strict`` and ``dryRun=All`` (the full validation, nothing stored);
  a sample of them, and every one over 1 MiB (etcd refuses requests over 1.5 MiB: only a real write
  gets there), without the dry run. Each must be refused (4xx) with the field's path in the
  answer's message or causes.
- Valid (:func:`manifests.valid`, every served version, at most 2 replicas each): created for real
  while the operator runs (in this process, with a client of its own). Each must reach a status
  for its current generation with a ``Ready`` condition that has a reason and a message; when not
  Ready, the reason must say why (not the catch-all ``Waiting`` or ``ReconcileFailed``, which for a
  valid object would mean the operator built something the API server refuses). The operator's
  queue must drain, the statuses must then stay as they are, and it must still follow a new spec
  afterwards. A reconcile may fail terminally (not retried) only on a spec the API server accepts
  but the operator cannot use (a runtime it has no entry for, ...): every object a reconcile failed
  terminally on (the controller's log line, with the object's name) must say
  ``Ready=False/InvalidSpec``, and the terminal failures counted on the controller's metrics must
  be those logged; every other failure was retried until the object settled.

Hypothesis runs in generate-only mode with a seed (printed; ``MLOPS_RELIABILITY_SEED`` replays a
run) and no example database, so a run is reproducible; what a failure shows is the manifest itself
(its version, category, field and value), not a shrunk example. Run with ``-s`` for the figures.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from mlops_platform import api
from mlops_platform.controllers.inferenceservice import reconciler
from mlops_platform.runtime.control import controller as rcontroller
from mlops_platform.runtime.observability import logs
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import manifests, operator, probes, reliability, wait
from mlops_platform.testing.scenario import Scenario

INVALID = reliability.scale(250, 60)
VALID = reliability.scale(200, 24)
#: invalid manifests also sent without the dry run (besides every one over 1 MiB)
UNDRIED = reliability.scale(40, 10)
#: requests in flight at once
CONCURRENCY = 8
#: the bound for the valid objects to settle, from the last create (the wait's timeout is longer)
SETTLE_WITHIN = reliability.scale(240, 60)
SETTLE_TIMEOUT = SETTLE_WITHIN + 120
#: a window in which settled statuses must not change (a measurement window, not a synchronisation)
STABLE_SECONDS = 3.0
#: Ready reasons that do not say why an object is not Ready
VAGUE = frozenset({"", "Waiting", "ReconcileFailed", "Unknown"})
#: Ready reasons of a state on its way to another (a rollout ends Serving, Unschedulable, ...): the
#: queue can be idle meanwhile (nothing to do but wait for the pods), so this is not settled yet
PASSING = frozenset({"RollingOut"})
#: hypothesis runs (seed, seed + 1, ...) at most, to draw enough distinct examples
ROUNDS = 4
#: the controller's log line of a reconcile that failed terminally (``runtime.control.controller``)
TERMINAL = "reconcile failed permanently (not retried)"

T = TypeVar("T")


def _draw(strategy: st.SearchStrategy[T], count: int, run_seed: int) -> list[T]:
    """``count`` distinct examples of ``strategy``, drawn by hypothesis from ``run_seed`` (and the
    next seeds, while duplicates leave it short: at most ``ROUNDS`` runs)."""
    drawn: dict[str, T] = {}
    for round_ in range(ROUNDS):
        missing = count - len(drawn)
        if missing <= 0:
            break

        @seed(run_seed + round_)
        @settings(
            max_examples=missing + missing // 3 + 5,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(strategy)
        def collect(example: T) -> None:
            if len(drawn) < count:
                drawn.setdefault(json.dumps(example, default=vars), example)

        collect()
    assert len(drawn) == count, f"hypothesis drew {len(drawn)} distinct examples, {count} wanted"
    return list(drawn.values())


@dataclasses.dataclass
class Refusal:
    """The API server's answer to one invalid manifest."""

    invalid: manifests.Invalid
    dry_run: bool
    status: int  # 2xx: accepted (a bug)
    message: str
    causes: list[dict[str, Any]]

    @property
    def names_field(self) -> bool:
        field = self.invalid.field
        return field in self.message or any(
            field in str(c.get("field", "")) or field in str(c.get("message", "")) for c in self.causes
        )

    def problem(self) -> str | None:
        where = f"{self.invalid.describe()} ({self.invalid.size} bytes, dryRun={self.dry_run})"
        if self.status < 400:
            return f"ACCEPTED {where}"
        if self.status >= 500:
            return f"{self.status} (a server error, not a refusal) {where}: {self.message[:300]}"
        if not self.names_field:
            return f"refused without naming the field: {where}: {self.status} {self.message[:300]}"
        return None


async def _post(c: rclient.Client, ns: str, inv: manifests.Invalid, *, dry_run: bool) -> Refusal:
    res = manifests.RESOURCES[inv.version]
    params = {"fieldValidation": "Strict", "dryRun": "All" if dry_run else None}
    try:
        await c.request("POST", res.path(ns), params=params, body=inv.obj, resource=res.plural, namespace=ns)
    except rclient.ApiError as e:
        causes = list((e.body.get("details") or {}).get("causes") or [])
        return Refusal(inv, dry_run, e.status, e.message, causes)
    if not dry_run:  # accepted for real: a bug; remove it so the valid half counts only its own
        await c.delete(res, inv.obj["metadata"]["name"], ns)
    return Refusal(inv, dry_run, 201, "", [])


async def _bounded(limit: int, jobs: list[Any]) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(job: Any) -> Any:
        async with gate:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


def _explained(obj: dict[str, Any]) -> str | None:
    """Why the status of ``obj`` does not (yet) explain itself for its generation, or None."""
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return f"observedGeneration {status.get('observedGeneration')} of {obj['metadata'].get('generation')}"
    ready = probes.condition(obj, "Ready")
    if not ready:
        return "no Ready condition"
    if not ready.get("reason") or not ready.get("message"):
        return f"Ready={ready.get('status')} without a reason or message: {ready}"
    if ready.get("status") != "True" and ready["reason"] in VAGUE:
        return f"Ready={ready.get('status')}/{ready['reason']}: {ready.get('message', '')[:300]}"
    if ready["reason"] in PASSING:
        return f"still {ready['reason']}: {ready.get('message', '')[:300]}"
    return None


class _Terminal(logging.Handler):
    """The names of the objects a reconcile failed terminally on, from the controller's log lines
    (the record's log context names the object)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.names: collections.Counter[str] = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == TERMINAL:
            self.names[logs.current_context().get("name", "<no name>")] += 1


@contextlib.asynccontextmanager
async def _terminal_failures() -> AsyncIterator[_Terminal]:
    """The terminal reconcile failures of the operator in this process during the block."""
    logger, handler = logging.getLogger(rcontroller.__name__), _Terminal()
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def _ready(obj: dict[str, Any]) -> tuple[str, str]:
    cond = probes.condition(obj, "Ready")
    return str(cond.get("status")), str(cond.get("reason"))


async def test_hostile_and_random_input(scenario: Scenario) -> None:
    c, ns = scenario.client, scenario.namespace
    run_seed, _ = scenario.seeded("hostile input")
    started = time.monotonic()
    invalid = _draw(manifests.invalid(), INVALID, run_seed)
    valid = _draw(manifests.valid(), VALID, run_seed + 1)
    drawn_s = time.monotonic() - started

    # -- invalid: refused, naming the field ----------------------------------------------------
    for inv in invalid:
        inv.obj["metadata"]["namespace"] = ns
    heavy = [inv for inv in invalid if inv.size > 1 << 20]
    sample = [inv for inv in invalid if inv.size <= 1 << 20][:UNDRIED]
    sent = time.monotonic()
    refusals: list[Refusal] = await _bounded(
        CONCURRENCY,
        [_post(c, ns, inv, dry_run=True) for inv in invalid]
        + [_post(c, ns, inv, dry_run=False) for inv in [*sample, *heavy]],
    )
    invalid_s = time.monotonic() - sent
    problems = [p for r in refusals if (p := r.problem())]
    by_category = collections.Counter(inv.category for inv in invalid)
    by_version = collections.Counter(inv.version for inv in invalid)
    codes = collections.Counter(r.status for r in refusals)
    biggest = max(inv.size for inv in invalid)
    print(
        f"invalid: {len(invalid)} manifests ({dict(by_version)}; {dict(by_category)}), "
        f"{len(refusals)} requests ({len(refusals) - len(invalid)} without dryRun, {len(heavy)} over 1 MiB, "
        f"the biggest {biggest / 2**20:.2f} MiB) in {invalid_s:.1f} s; answers {dict(codes)}"
    )
    assert not problems, f"seed {run_seed}: {len(problems)} problems:\n" + "\n".join(problems[:30])
    assert (await c.list(api.RESOURCE, ns))["items"] == [], "an invalid manifest was stored"

    # -- valid: created while the operator runs, each settles with a status that explains it ------
    names = [f"rand-{i:03d}" for i in range(len(valid))]
    async with (
        rclient.Client.from_kubeconfig(scenario.kubeconfig) as oc,
        _terminal_failures() as failed,
        operator.running(oc, namespace=ns) as mgr,
    ):
        ctrl = mgr.controllers[0]
        assert ctrl.primary == reconciler.ISVC

        async def create(name: str, obj: dict[str, Any]) -> str | None:
            obj["metadata"]["name"] = name
            res = manifests.RESOURCES[manifests.version_of(obj)]
            try:
                await c.request(
                    "POST", res.path(ns), params={"fieldValidation": "Strict"}, body=obj, resource=res.plural
                )
            except rclient.ApiError as e:
                return f"{name} ({manifests.version_of(obj)}): refused {e.status}: {e.message[:300]}\n{obj}"
            return None

        creating = time.monotonic()
        refused = [
            r
            for r in await _bounded(CONCURRENCY, [create(n, o) for n, o in zip(names, valid, strict=True)])
            if r
        ]
        created = time.monotonic()
        assert not refused, f"seed {run_seed}: valid manifests refused:\n" + "\n".join(refused[:10])

        unexplained: dict[str, str] = {}
        analysed: set[str] = set()

        def quiet(analysed: set[str]) -> bool:
            """The queue idle, or only canary analyses' own re-checks scheduled: an analysis
            requeues itself for its interval's end, then every 30 s while it holds (here for ever:
            no Prometheus answers this operator), and nothing else may wait."""
            waiting = ctrl.queue.waiting()
            return ctrl.queue.nothing_due() and all(r.name in analysed for r in waiting)

        async def settled() -> bool:
            unexplained.clear()
            for obj in (await c.list(api.RESOURCE, ns))["items"]:
                if ((obj["spec"].get("canary") or {}).get("analysis")) is not None:
                    analysed.add(obj["metadata"]["name"])
                if why := _explained(obj):
                    unexplained[obj["metadata"]["name"]] = why
            return not unexplained and quiet(analysed)

        try:
            await wait.until(settled, timeout=SETTLE_TIMEOUT, interval=1.0, what="every valid object settled")
        except TimeoutError as e:
            sample_of = dict(list(unexplained.items())[:15])
            raise AssertionError(
                f"seed {run_seed}: {len(unexplained)} of {len(names)} not settled (queue quiet: "
                f"{quiet(analysed)}, waiting: {ctrl.queue.waiting()[:5]}): {sample_of}"
            ) from e
        settle_s = time.monotonic() - created
        before = {o["metadata"]["name"]: _ready(o) for o in (await c.list(api.RESOURCE, ns))["items"]}
        await asyncio.sleep(STABLE_SECONDS)  # a measurement window: nothing may change in it
        await wait.until(lambda: quiet(analysed), timeout=60, what="operator queue quiet after the window")
        settled_objs = (await c.list(api.RESOURCE, ns))["items"]
        after = {o["metadata"]["name"]: _ready(o) for o in settled_objs}
        why = {"/".join(_ready(o)): str(probes.condition(o, "Ready").get("message")) for o in settled_objs}
        changed = {n: (before[n], after.get(n)) for n in before if before[n] != after.get(n)}
        assert not changed, f"seed {run_seed}: statuses changed after settling: {changed}"

        # still alive: a new spec of the first object is seen and reported
        first = names[0]
        live = await c.get(api.RESOURCE, first, ns)
        model = live["spec"]["predictor"]["model"]
        bumped = {"spec": {"predictor": {"model": {**model, "uri": f"s3://models/{first}/bumped"}}}}
        for key in ("sha256",):  # the new file has another digest
            bumped["spec"]["predictor"]["model"].pop(key, None)
        await c.patch(api.RESOURCE, first, bumped, namespace=ns)
        await wait.until(
            lambda: _observed(c, ns, first, live["metadata"]["generation"] + 1),
            timeout=60,
            what=f"{first}'s status for its new generation",
        )
        registry = ctrl.metrics.registry
        errors = registry.get_sample_value(
            "controller_runtime_reconcile_errors_total", {"controller": ctrl.name}
        )
        # terminal: not retried; read with the log lines of the same failures (no await between)
        terminal = registry.get_sample_value(
            "controller_runtime_terminal_reconcile_errors_total", {"controller": ctrl.name}
        )
        terminal_on = dict(failed.names)
        # the statuses now: each object a terminal failure was logged for had its status written first
        final = {o["metadata"]["name"]: _ready(o) for o in (await c.list(api.RESOURCE, ns))["items"]}
        reconciles = sum(
            registry.get_sample_value(
                "controller_runtime_reconcile_total", {"controller": ctrl.name, "result": r}
            )
            or 0
            for r in ("success", "error", "requeue", "requeue_after")
        )
        assert mgr.is_ready(), "the operator is not ready any more"

    outcomes = collections.Counter(f"{s}/{r}" for s, r in after.values())
    for reason, message in sorted(why.items()):
        print(f"  Ready {reason}, e.g.: {message[:200]}")
    valid_versions = collections.Counter(manifests.version_of(o) for o in valid)
    invalid_spec = {n for n, (s, r) in final.items() if (s, r) == ("False", "InvalidSpec")}
    print(
        f"valid: {len(valid)} manifests ({dict(valid_versions)}) created in {created - creating:.1f} s, "
        f"settled {settle_s:.1f} s after the last; Ready: {dict(outcomes)}; operator: {reconciles:.0f} "
        f"reconciles, {errors or 0:.0f} failed ({terminal or 0:.0f} of them terminally, not retried: on "
        f"{len(terminal_on)} objects, {len(invalid_spec)} say InvalidSpec); drawing took {drawn_s:.1f} s"
    )
    assert settle_s <= SETTLE_WITHIN, (
        f"settled {settle_s:.1f} s after the last create (bound {SETTLE_WITHIN} s)"
    )
    # a terminal failure only where the status says the spec cannot be used, and every one logged
    not_invalid = {n: final.get(n) for n in terminal_on if n not in invalid_spec}
    assert not not_invalid, f"seed {run_seed}: reconciles failed terminally on {not_invalid} (Ready)"
    assert sum(terminal_on.values()) == (terminal or 0), (
        f"{terminal or 0:.0f} terminal failures counted, {sum(terminal_on.values())} logged: {terminal_on}"
    )
    scenario.report(
        "9. Hostile and random input",
        1,
        f"{len(invalid)} invalid manifests ({len(by_category)} categories, up to "
        f"{biggest / 2**20:.1f} MiB; {len(refusals) - len(invalid)} also without dry run) and "
        f"{len(valid)} valid random ones",
        len(invalid) + len(valid),
        f"seed {run_seed}; every invalid one refused naming its field ({dict(codes)}); valid ones "
        f"Ready: {', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))}; operator "
        f"{errors or 0:.0f} failed reconciles ({terminal or 0:.0f} terminally, all on InvalidSpec "
        "objects), queue drained",
        max_converge_s=settle_s,
    )


async def _observed(c: rclient.Client, ns: str, name: str, generation: int) -> bool:
    obj = await c.get(api.RESOURCE, name, ns)
    observed = (obj.get("status") or {}).get("observedGeneration")
    return bool(observed == generation == obj["metadata"]["generation"])
