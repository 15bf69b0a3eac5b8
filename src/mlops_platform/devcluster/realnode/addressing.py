"""The local cluster's address block and what each address in it is for.

Every local cluster owns one ``/16`` of ``10.200.0.0/12``'s first :data:`SLOTS` blocks (its *slot*,
kept in ``<workdir>/<name>.slot`` from its creation to its ``dev down``), so that clusters started
side by side (``make test`` runs two) never share an address. Inside the block ``10.B.0.0/16``:

=====================  ==============================================================
``10.B.255.1/30``      the host's end of the one veth pair that joins the cluster to the host
``10.B.255.2/30``      the fabric namespace's end of it
``10.B.0.1/24``        the fabric's bridge: the nodes' gateway and the API server's address
                       (``--advertise-address``; a bridge to the host's loopback listens there,
                       on the API server's own port)
``10.B.0.(10+i)``      node ``i``'s address (its ``InternalIP``: the API server reaches its kubelet there)
``10.B.(1+i).0/24``    node ``i``'s pods (i < 60)
``10.B.64.0/18``       the kwok nodes' pods (kwok's ``--cidr``: fake addresses, but inside the block)
``10.B.128.0/17``      the Services (``--service-cluster-ip-range``); ``.128.1`` is ``kubernetes``,
                       ``.128.10`` the cluster DNS
=====================  ==============================================================

The host has one route for the whole block, into its veth: a host process that sends to any
cluster address (pod, Service, node) reaches the fabric, never the machine's default route.
"""

from __future__ import annotations

import dataclasses
import ipaddress

#: clusters that can exist at once on a machine (each a /16 of 10.200.0.0/12)
SLOTS = 16
_FIRST = ipaddress.IPv4Network("10.200.0.0/16")
MAX_NODES = 60  # real nodes' pod ranges end below the kwok pods' 10.B.64.0/18


@dataclasses.dataclass(frozen=True)
class Block:
    """The addresses of the cluster in slot ``slot`` (0 <= slot < :data:`SLOTS`)."""

    slot: int

    def __post_init__(self) -> None:
        if not 0 <= self.slot < SLOTS:
            raise ValueError(f"slot {self.slot} is outside 0..{SLOTS - 1}")

    def _addr(self, c: int, d: int) -> str:
        base = int(_FIRST.network_address) + (self.slot << 16)
        return str(ipaddress.IPv4Address(base + (c << 8) + d))

    @property
    def network(self) -> str:
        """The whole block, ``10.B.0.0/16``: the one route the host gets."""
        return f"{self._addr(0, 0)}/16"

    @property
    def host_address(self) -> str:
        return self._addr(255, 1)

    @property
    def fabric_uplink_address(self) -> str:
        return self._addr(255, 2)

    @property
    def transit_prefix(self) -> int:
        return 30

    @property
    def api_address(self) -> str:
        """The fabric bridge's address: gateway of the nodes, the API server's advertised address."""
        return self._addr(0, 1)

    @property
    def node_link_prefix(self) -> int:
        return 24

    def node_address(self, index: int) -> str:
        _check_node(index)
        return self._addr(0, 10 + index)

    def pod_cidr(self, index: int) -> str:
        _check_node(index)
        return f"{self._addr(1 + index, 0)}/24"

    def pod_gateway(self, index: int) -> str:
        _check_node(index)
        return self._addr(1 + index, 1)

    @property
    def fake_pod_cidr(self) -> str:
        """The addresses kwok gives the fake nodes' pods (no packet ever reaches them: the fabric
        has no route for them, and they never take the host's default route)."""
        return f"{self._addr(64, 0)}/18"

    @property
    def kwok_cidr(self) -> str:
        """:attr:`fake_pod_cidr` as kwok's ``--cidr`` takes it (its first address)."""
        return f"{self._addr(64, 1)}/18"

    @property
    def pod_cidrs(self) -> str:
        """Every node's pods, real and fake (``10.B.0.0/17``: kube-proxy's ``clusterCIDR``)."""
        return f"{self._addr(0, 0)}/17"

    @property
    def service_cidr(self) -> str:
        return f"{self._addr(128, 0)}/17"

    @property
    def kubernetes_service_ip(self) -> str:
        return self._addr(128, 1)

    @property
    def dns_service_ip(self) -> str:
        return self._addr(128, 10)


def _check_node(index: int) -> None:
    if not 0 <= index < MAX_NODES:
        raise ValueError(f"node index {index} is outside 0..{MAX_NODES - 1}")


def overlaps(block: Block, routes: list[str]) -> list[str]:
    """The host routes (destinations as ``ip route`` prints them) that overlap the block, other
    than the default route."""
    net = ipaddress.IPv4Network(block.network)
    hits = []
    for dst in routes:
        if dst in ("default", "0.0.0.0/0"):
            continue
        try:
            other = ipaddress.IPv4Network(dst, strict=False)
        except ValueError:
            continue
        if net.overlaps(other):
            hits.append(dst)
    return hits


def free_slot(taken: set[int], routes: list[str]) -> int:
    """The lowest slot that no other cluster holds and no host route overlaps."""
    for slot in range(SLOTS):
        if slot not in taken and not overlaps(Block(slot), routes):
            return slot
    raise RuntimeError(
        f"no free address block for another local cluster: {len(taken)} clusters hold slots and the"
        f" host's routes overlap the rest of 10.200.0.0/12 ({', '.join(routes) or 'none'})"
    )
