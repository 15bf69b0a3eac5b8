"""Partitioning of a shard group (:mod:`~mlops_platform.runtime.control.sharding`): which bucket and
partition an object falls in, and the fair-share decision of who holds which partition. Pure
functions: no I/O, no clock, the same result in every process and release.

Contract (``P``: the group's partition count, ``1 <= P <=`` :data:`BUCKETS`):

- **Buckets.** A request's bucket is :func:`bucket_of`: the first 8 bytes (big endian) of the
  SHA-256 of ``namespace/name`` (``name`` when cluster-scoped), modulo :data:`BUCKETS` (256): the
  same in every process and release (Python's ``hash()`` is salted per process).
- **Partitions.** A request's partition (:func:`partition_of`) is its bucket modulo ``P``; so a
  bucket never changes with ``P``, and children labelled with their owner's bucket
  (:data:`BUCKET_LABEL`) are selected by :func:`partition_selector` without relabelling when ``P``
  changes.
- **Fair share.** A replica aims at ``ceil(P / live members)`` partitions (:func:`fair_share`); it
  keeps its best-ranked ones, releases the rest, and free partitions go to members under their
  share by rendezvous hashing (highest :func:`rank` first): :func:`plan`. Replicas whose views
  agree thus agree on who takes what.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import math
from collections.abc import Collection, Mapping

from mlops_platform.runtime.control.reconcile import Request

__all__ = [
    "BUCKETS",
    "BUCKET_LABEL",
    "Plan",
    "bucket_of",
    "fair_share",
    "partition_of",
    "partition_selector",
    "plan",
    "preference",
    "rank",
]

#: hash buckets of the primary objects; a partition is a fixed set of buckets (bucket mod P)
BUCKETS = 256
#: the label carrying its owner's bucket on every child (sharding's "Scoped caches")
BUCKET_LABEL = "mlops.platform/shard-bucket"
_NO_BUCKET = "none"  # a value no object carries: the selector of no partition


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def bucket_of(request: Request) -> int:
    """The bucket of ``request``: SHA-256 of ``namespace/name`` (first 8 bytes) mod :data:`BUCKETS`."""
    key = f"{request.namespace}/{request.name}" if request.namespace else request.name
    return _hash64(key) % BUCKETS


def partition_of(request: Request, partitions: int) -> int:
    """The partition of ``request``: its :func:`bucket_of` mod ``partitions``."""
    return bucket_of(request) % partitions


def partition_selector(held: Collection[int], partitions: int) -> str:
    """The label selector of the children of the ``held`` partitions (of ``partitions``): the
    :data:`BUCKET_LABEL` values of their buckets; matches nothing when ``held`` is empty."""
    buckets = [str(b) for b in range(BUCKETS) if b % partitions in held]
    return f"{BUCKET_LABEL} in ({','.join(buckets) or _NO_BUCKET})"


def fair_share(partitions: int, members: int) -> int:
    """How many partitions each of ``members`` live replicas should hold: ``ceil(P / members)``."""
    return math.ceil(partitions / max(1, members))


def rank(identity: str, partition: int) -> int:
    """The rendezvous (highest-random-weight) score of ``identity`` for ``partition``."""
    return _hash64(f"{identity}\x00{partition}")


def preference(identity: str, partitions: int) -> list[int]:
    """The partitions in the order ``identity`` prefers them (highest :func:`rank` first)."""
    return sorted(range(partitions), key=lambda k: rank(identity, k), reverse=True)


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """What one replica should do now (see :func:`plan`)."""

    share: int  # partitions this replica should hold
    members: int  # live members, this replica included
    acquire: frozenset[int]  # partitions this replica may take now
    release: tuple[int, ...]  # held partitions beyond the share, to give up


def plan(
    identity: str,
    partitions: int,
    members: Collection[str],
    holders: Mapping[int, str],
    leading: Collection[int] = (),
) -> Plan:
    """The fair-share decision of ``identity`` from its view of the group.

    ``members``: live members (``identity`` is added); ``holders``: partition -> live holder as seen
    (free partitions are absent); ``leading``: the partitions whose Lease this replica's electors hold
    (they override ``holders``). A holder that is not a live member still counts as holding.

    - share = ``ceil(P / members)``; this replica keeps its ``share`` best-ranked partitions and
      releases the rest of those it leads;
    - a partition recorded as held by ``identity`` that no elector of it leads (the Lease of this
      identity before a restart) is taken back at once if it is within the share;
    - free partitions are matched to members under their share by descending ``rank(member, k)``;
      this replica may acquire the ones matched to it.
    """
    everyone = set(members) | {identity}
    share = fair_share(partitions, len(everyone))
    held = {k: h for k, h in holders.items() if 0 <= k < partitions and h}
    held.update({k: identity for k in leading})
    mine = sorted(
        (k for k, h in held.items() if h == identity), key=lambda k: rank(identity, k), reverse=True
    )
    keep = mine[:share]
    release = tuple(k for k in reversed(mine[share:]) if k in leading)  # worst-ranked first
    load = collections.Counter(h for k, h in held.items() if h != identity or k in keep)
    capacity = {m: max(0, share - load[m]) for m in everyone}
    free = [k for k in range(partitions) if k not in held]
    matched: dict[int, str] = {}
    for _, m, k in sorted(((rank(m, k), m, k) for m in everyone for k in free), reverse=True):
        if k not in matched and capacity[m] > 0:
            matched[k] = m
            capacity[m] -= 1
    acquire = {k for k in keep if k not in leading} | {k for k, m in matched.items() if m == identity}
    return Plan(share, len(everyone), frozenset(acquire), release)
