"""The reliability suite's shared parts (``tests/reliability``, ``docs/reliability.md``).

- :func:`repetitions`: how many times a scenario injects its fault: the full count under
  ``make test-reliability`` (``MLOPS_RELIABILITY=full``), a reduced one in ``make test``.
- :func:`audit` / :func:`converge`: the end state checked object by object. Every InferenceService
  the test expects exists (and every one it deleted is gone), with exactly one child of each kind
  and component, each controlled by it and carrying the spec the test last wrote (the model URI on
  the Deployment), a status that observed its current generation and says Ready; no child of any
  kind is left without its InferenceService (orphaned).
- :class:`StatusHistory`: every status the API server showed during a run (a watch started before
  the faults), to prove no status went back to an older generation.
- :class:`Row` and :func:`table`: one line of the published table per scenario.

The child kinds come from the controller's own list (``children.CHILDREN``): a kind added there is
audited without touching the suite. Optional kinds are audited where the cluster serves them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.controllers.inferenceservice.children import CHILDREN, deployment
from mlops_platform.devcluster import cluster
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.testing import background, isvc

#: ``full``: the repetitions of ``make test-reliability``; anything else: the reduced ones
MODE_ENV = "MLOPS_RELIABILITY"


def full() -> bool:
    """Whether this run is the full suite (``MLOPS_RELIABILITY=full``)."""
    return os.environ.get(MODE_ENV, "") == "full"


def repetitions(full_count: int, reduced: int) -> int:
    """``full_count`` under the full suite, else ``reduced`` (``make test``)."""
    return full_count if full() else reduced


def scale(full_count: int, reduced: int) -> int:
    """A size (objects, seconds) that differs between the full suite and ``make test``."""
    return repetitions(full_count, reduced)


#: replays a run's random choices: the seed a scenario printed
SEED_ENV = "MLOPS_RELIABILITY_SEED"


def seed(scenario: str, sizes: str = "") -> int:
    """The seed of a scenario's random choices: ``MLOPS_RELIABILITY_SEED``, else a new one; printed
    with how to replay it (and ``sizes``, the scenario's counts), so a failure can be replayed."""
    value = int(os.environ.get(SEED_ENV) or time.time_ns() % 1_000_000)
    print(f"\n{scenario}: seed {value} ({SEED_ENV}={value} replays it){', ' + sizes if sizes else ''}")
    return value


def audit_logs(cluster_name: str) -> list[Path]:
    """The API server's audit log files of the local cluster (``devcluster.cluster.audit_logs``), or
    an AssertionError saying how to get them (a cluster created before it had one)."""
    logs = cluster.audit_logs(cluster_name)
    assert logs, (
        f"cluster {cluster_name!r} has no API server audit log: it was created before the dev cluster "
        "logged writes; re-create it (mlops-platform dev down, then dev up)"
    )
    return logs


@dataclasses.dataclass(frozen=True)
class Expected:
    """What one InferenceService must look like at the end: present with ``model_uri`` on its
    Deployment, or ``deleted`` (gone, with every child)."""

    model_uri: str | None = None
    deleted: bool = False


@dataclasses.dataclass
class Audit:
    """The findings of one check of a namespace; each list holds ``"<name>: <what>"`` lines."""

    checked: int = 0
    children: int = 0
    lost: list[str] = dataclasses.field(default_factory=list)
    duplicated: list[str] = dataclasses.field(default_factory=list)
    orphaned: list[str] = dataclasses.field(default_factory=list)
    unsettled: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.orphaned or self.unsettled)

    def summary(self, limit: int = 10) -> str:
        parts = []
        for what in ("lost", "duplicated", "orphaned", "unsettled"):
            found: list[str] = getattr(self, what)
            if found:
                more = f" (+{len(found) - limit} more)" if len(found) > limit else ""
                parts.append(f"{what} {len(found)}: {'; '.join(found[:limit])}{more}")
        return ", ".join(parts) or f"ok ({self.checked} InferenceServices, {self.children} children)"


async def _children(client: rclient.Client, namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """(kind, object) of every object of a child kind the cluster serves, made by the operator."""
    out: list[tuple[str, dict[str, Any]]] = []
    seen: set[tuple[str, str]] = set()
    for child in CHILDREN:
        for version in child.kind.versions:
            resource = child.kind.resource(version)
            if (resource.group, resource.plural) in seen:
                continue
            try:
                listed = await client.list(resource, namespace, label_selector=labels.MANAGED_BY_SELECTOR)
            except rclient.ApiError as e:
                if e.status == 404:  # not served by this cluster (or not this version)
                    continue
                raise
            seen.add((resource.group, resource.plural))
            out.extend((resource.kind, obj) for obj in listed["items"])
    return out


def _controller_uid(obj: Mapping[str, Any]) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref["uid"])
    return None


def _settled(obj: Mapping[str, Any]) -> str | None:
    """Why the status of ``obj`` is not a settled one for its current generation, or None."""
    status = obj.get("status") or {}
    generation = obj["metadata"].get("generation")
    if status.get("observedGeneration") != generation:
        return f"status observed generation {status.get('observedGeneration')}, object is at {generation}"
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        reason = (ready or {}).get("reason", "no Ready condition")
        return f"not Ready ({reason}: {(ready or {}).get('message', '')})"
    return None


async def audit(
    client: rclient.Client,
    namespace: str,
    expected: Mapping[str, Expected],
    *,
    resource: rclient.Resource = isvc.RESOURCE,
    require_ready: bool = True,
) -> Audit:
    """Check ``namespace`` against ``expected`` once (see the module docstring)."""
    found = Audit()
    live = {o["metadata"]["name"]: o for o in (await client.list(resource, namespace))["items"]}
    by_uid = {str(o["metadata"]["uid"]): name for name, o in live.items()}
    owned: dict[tuple[str, str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for kind, child in await _children(client, namespace):
        found.children += 1
        meta = child["metadata"]
        uid = _controller_uid(child)
        if meta.get("deletionTimestamp"):
            found.orphaned.append(f"{kind} {meta['name']}: being deleted")
        elif uid is None or uid not in by_uid:
            found.orphaned.append(f"{kind} {meta['name']}: its InferenceService (uid {uid}) is gone")
        else:
            component = (meta.get("labels") or {}).get(labels.COMPONENT, "")
            owned[(by_uid[uid], kind, component)].append(child)
    for (owner, kind, component), objs in sorted(owned.items()):
        if len(objs) > 1:
            names = sorted(o["metadata"]["name"] for o in objs)
            found.duplicated.append(f"{owner}: {len(objs)} {kind}s of {component or 'it'}: {names}")
    for name in sorted(set(live) - set(expected)):
        found.duplicated.append(f"{name}: exists but the test never created it")
    dep_kind = deployment.CHILD.kind.kind
    for name, want in sorted(expected.items()):
        found.checked += 1
        obj = live.get(name)
        if want.deleted:
            if obj is not None:
                found.unsettled.append(f"{name}: deleted by the test but still there")
            continue
        if obj is None:
            found.lost.append(f"{name}: the InferenceService is gone")
            continue
        deployments = owned.get((name, dep_kind, labels.PREDICTOR), [])
        if not deployments:
            found.lost.append(f"{name}: no predictor Deployment")
        uris = {
            (d["metadata"].get("annotations") or {}).get(labels.MODEL_URI_ANNOTATION) for d in deployments
        }
        if want.model_uri is not None and deployments and uris != {want.model_uri}:
            found.lost.append(
                f"{name}: Deployment has model {sorted(map(str, uris))}, spec says {want.model_uri}"
            )
        if require_ready and (why := _settled(obj)):
            found.unsettled.append(f"{name}: {why}")
    return found


@dataclasses.dataclass
class Converged:
    """The last audit and how long it took to pass (or the whole timeout, if it did not)."""

    audit: Audit
    seconds: float


async def converge(
    client: rclient.Client,
    namespace: str,
    expected: Mapping[str, Expected],
    *,
    timeout: float,
    since: float | None = None,
    interval: float = 0.5,
    **options: Any,
) -> Converged:
    """Audit ``namespace`` until it passes or ``timeout`` seconds are over; the time is counted from
    ``since`` (a ``time.monotonic()`` value: when the fault ended) or from the call. The caller
    asserts ``converged.audit.ok``, so a failure shows what was still wrong."""
    start = time.monotonic() if since is None else since
    deadline = time.monotonic() + timeout
    while True:
        last = await audit(client, namespace, expected, **options)
        if last.ok or time.monotonic() >= deadline:
            return Converged(last, time.monotonic() - start)
        await asyncio.sleep(interval)  # a poll interval, not a synchronisation: the loop re-checks


@dataclasses.dataclass
class StatusHistory:
    """Every ``status.observedGeneration`` each InferenceService showed, in watch order."""

    observed: dict[str, list[int]] = dataclasses.field(default_factory=lambda: collections.defaultdict(list))
    events: int = 0

    def regressions(self) -> list[str]:
        """``"<name>: <a> after <b>"`` for each observed generation lower than one seen before it."""
        out = []
        for name, seen in sorted(self.observed.items()):
            high = 0
            for g in seen:
                if g < high:
                    out.append(f"{name}: observedGeneration {g} after {high}")
                high = max(high, g)
        return out


@contextlib.asynccontextmanager
async def status_history(
    client: rclient.Client, namespace: str, resource: rclient.Resource = isvc.RESOURCE
) -> AsyncIterator[StatusHistory]:
    """Record :class:`StatusHistory` from a watch started before the block (re-started from the
    last resourceVersion when the API server ends it, re-listed on ``410 Gone``)."""
    history = StatusHistory()
    rv = (await client.list(resource, namespace))["metadata"]["resourceVersion"]

    def note(obj: Mapping[str, Any]) -> None:
        generation = (obj.get("status") or {}).get("observedGeneration")
        if generation is not None:
            history.observed[obj["metadata"]["name"]].append(int(generation))

    async def run() -> None:
        nonlocal rv
        relist = False
        while True:
            try:
                if relist:  # compacted: the objects as they are now (a gap, not a regression)
                    listed = await client.list(resource, namespace)
                    rv, relist = listed["metadata"]["resourceVersion"], False
                    for obj in listed["items"]:
                        note(obj)
                async for event in client.watch(
                    resource, namespace, resource_version=rv, timeout_seconds=300
                ):
                    obj = event["object"]  # an ERROR event is raised as ApiError
                    rv = obj["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        history.events += 1
                        note(obj)
            except rclient.ApiError as e:
                relist = e.status == 410
                await asyncio.sleep(0.5)  # a back-off before the next try, not a synchronisation
            except Exception:  # connection lost (the API server restarting): again from rv
                await asyncio.sleep(0.5)

    async with background.task(run()):
        yield history


@dataclasses.dataclass(frozen=True)
class Row:
    """One scenario's line of ``docs/reliability.md``."""

    scenario: str
    repetitions: int
    faults: str  # what was injected, how many times ("12 SIGKILLs during a rollout")
    checked: int  # objects checked (InferenceServices and their children, or manifests)
    lost: int = 0
    duplicated: int = 0
    orphaned: int = 0
    max_converge_s: float | None = None
    notes: str = ""


COLUMNS = (
    "scenario",
    "repetitions",
    "faults injected",
    "objects checked",
    "lost",
    "duplicated",
    "orphaned",
    "max time to converge",
    "notes",
)


def table(rows: list[Row]) -> str:
    """The Markdown table of ``rows`` (in the order given)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        seconds = "—" if r.max_converge_s is None else f"{r.max_converge_s:.1f} s"
        cells = (
            r.scenario,
            r.repetitions,
            r.faults,
            r.checked,
            r.lost,
            r.duplicated,
            r.orphaned,
            seconds,
            r.notes,
        )
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
