"""The activator's view of the cluster, and its one kind of write: parking slices.

The operator labels a predictor Service :data:`PARKED` while its KEDA-scaled model has no available
replica (the EndpointSlice controller copies the label onto the Service's own slices). For each
parked Service the activator keeps one more EndpointSlice of that Service, :func:`parking_slice`
(``<service>-activator``, ``managed-by`` :data:`MANAGER`, which the EndpointSlice controller leaves
alone; owned by the Service), listing the activator's ready pods on the Service's ``http`` port:
kube-proxy then sends the Service's traffic to the activator. Once the operator removes the label
(a replica is available) the activator deletes that slice and the Service points at the model alone.

:func:`plan` (pure) decides, from the slices the activator watches, what the :class:`~.waiting.Room`
learns (each parked Service's ready endpoints, from its own slices; a Service that is no longer
parked is reached by its name, so that requests still held go to it) and which parking slices to
write or delete. :class:`Parking` runs it on every change: every replica of the activator computes
and applies the same slices (server-side apply, one field manager), so they need no leader.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from mlops_platform.activator import contract, waiting
from mlops_platform.activator.target import Target
from mlops_platform.runtime.caching import informer as rinformer
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

log = logging.getLogger(__name__)
Obj = dict[str, Any]

PARKED = f"{contract.PARKED_KEY}={contract.PARKED_VALUE}"
SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
MANAGER = "activator.mlops.platform"
FIELD_MANAGER = "mlops-activator"
#: the Service port (by name) the activator serves: the model server's HTTP port
PORT_NAME = "http"


def ready_endpoints(slices: Iterable[Obj], port_name: str = PORT_NAME) -> list[str]:
    """``ip:port`` of every ready endpoint of ``slices`` on the port named ``port_name``."""
    out = []
    for s in slices:
        port = next((p.get("port") for p in s.get("ports") or () if p.get("name") == port_name), None)
        if port is None:
            continue
        for e in s.get("endpoints") or ():
            if (e.get("conditions") or {}).get("ready", True) is not False:
                out += [f"{a}:{port}" for a in e.get("addresses") or ()]
    return sorted(set(out))


def parking_slice(target: Target, service_uid: str, activator: list[str], port: int) -> Obj:
    """The EndpointSlice that sends ``target``'s ``http`` traffic to the activator's pods."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{target.service}-activator",
            "namespace": target.namespace,
            "labels": {
                SERVICE_NAME: target.service,
                MANAGED_BY: MANAGER,
                contract.PARKED_KEY: contract.PARKED_VALUE,
            },
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Service", "name": target.service, "uid": service_uid}
            ],
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in sorted(activator)],
        "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}],
    }


@dataclasses.dataclass(frozen=True)
class Plan:
    #: each parked Service's ready endpoints (its own slices')
    ready: Mapping[Target, list[str]]
    #: parked Services whose parking slice is missing or lists other activator pods
    park: tuple[Target, ...]
    #: parking slices of Services no longer parked
    unpark: tuple[Target, ...]


def _target(s: Obj) -> Target | None:
    meta = s.get("metadata") or {}
    name = (meta.get("labels") or {}).get(SERVICE_NAME)
    return Target(meta.get("namespace", ""), name) if name else None


def plan(parked_slices: Iterable[Obj], activator: list[str]) -> Plan:
    """What to do, from the slices labelled :data:`PARKED` (the Services' own and the parking ones)
    and the activator's ready pod IPs."""
    own: dict[Target, list[Obj]] = {}
    ours: dict[Target, Obj] = {}
    for s in parked_slices:
        t = _target(s)
        if t is None:
            continue
        if ((s.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == MANAGER:
            ours[t] = s
        else:
            own.setdefault(t, []).append(s)
    want = sorted(activator)

    def listed(s: Obj) -> list[str]:
        return sorted(a for e in s.get("endpoints") or () for a in e.get("addresses") or ())

    park = tuple(sorted(t for t in own if want and (t not in ours or listed(ours[t]) != want)))
    unpark = tuple(sorted(t for t in ours if t not in own))
    return Plan({t: ready_endpoints(ss) for t, ss in own.items()}, park, unpark)


class Parking:
    """Watches the parked Services' slices and the activator's own, keeps the room and the parking
    slices in step (see the module doc)."""

    def __init__(
        self, client: rclient.Client, room: waiting.Room, namespace: str, service: str, proxy_port: int
    ) -> None:
        self.client, self.room, self.proxy_port = client, room, proxy_port
        slices = resources.ENDPOINT_SLICE
        self.parked = rinformer.Informer(client, slices, label_selector=PARKED)
        self.mine = rinformer.Informer(
            client, slices, namespace=namespace, label_selector=f"{SERVICE_NAME}={service}"
        )
        self._changed = asyncio.Event()
        self._uids: dict[Target, str] = {}
        self._ports: dict[Target, int] = {}
        for inf in (self.parked, self.mine):
            inf.add_event_handler(_Poke(self._changed))

    def waiting_for(self) -> str | None:
        """None once both watches have synced (parking can work), else which have not, and why."""
        pending = [
            f"{what} ({inf.last_error or 'listing'})"
            for what, inf in (("parked Services' slices", self.parked), ("its own slices", self.mine))
            if not inf.has_synced()
        ]
        return ", ".join(pending) or None

    async def run(self) -> None:
        tasks = [self.parked.start(), self.mine.start()]
        try:
            while True:
                await self._changed.wait()
                self._changed.clear()
                try:
                    await self.sync()
                except (rclient.ApiError, OSError) as e:  # the next change (or resync) retries
                    log.warning("parking sync failed", extra={"error": str(e)})
        finally:
            for t in tasks:
                t.cancel()

    async def sync(self) -> None:
        if not (self.parked.has_synced() and self.mine.has_synced()):
            return
        activator = [
            e.rsplit(":", 1)[0] for e in ready_endpoints(self.mine.store.list(), contract.PROXY_PORT_NAME)
        ]
        p = plan(self.parked.store.list(), activator)
        for t, ready in p.ready.items():
            self.room.set_ready(t, ready)
        for t in p.park:
            await self._park(t, activator)
        for t in p.unpark:
            # requests still held go to the Service itself, which now points at the model
            self._uids.pop(t, None)
            port = self._ports.pop(t, None)
            if port is not None:
                self.room.set_ready(t, [f"{t.service}.{t.namespace}.svc:{port}"])
            try:
                await self.client.delete(resources.ENDPOINT_SLICE, f"{t.service}-activator", t.namespace)
            except rclient.ApiError as e:
                if not e.not_found:
                    raise
            log.info("unparked", extra={"service": str(t)})

    async def _park(self, t: Target, activator: list[str]) -> None:
        if t not in self._uids:
            svc = await self.client.get(resources.SERVICE, t.service, t.namespace)
            self._uids[t] = svc["metadata"]["uid"]
            port = next(
                (p["port"] for p in svc["spec"].get("ports") or () if p.get("name") == PORT_NAME), None
            )
            if port is not None:
                self._ports[t] = int(port)
        obj = parking_slice(t, self._uids[t], activator, self.proxy_port)
        await self.client.apply(resources.ENDPOINT_SLICE, obj, field_manager=FIELD_MANAGER)
        log.info("parked", extra={"service": str(t), "activator": activator})


class _Poke:
    def __init__(self, changed: asyncio.Event) -> None:
        self.changed = changed

    def on_add(self, obj: Obj) -> None:
        self.changed.set()

    def on_update(self, old: Obj, new: Obj) -> None:
        self.changed.set()

    def on_delete(self, obj: Obj) -> None:
        self.changed.set()
