"""The local control plane through a kube-apiserver outage, as a cluster lives through one.

kube-controller-manager and kube-scheduler exit when they cannot renew their leader Lease within
their renew deadline (10 s): an API server down a little longer (a restart on loaded cores) takes
them with it. In a cluster the kubelet starts such a static pod again; on the local control plane
(processes started by kwokctl) :func:`apiserver_restarted` does, and a test that stops kube-apiserver
leaves the cluster whole for the tests after it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence

from mlops_platform.devcluster import chaos
from mlops_platform.runtime import clock
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import wait

#: how long kube-apiserver may take to be ready again, and a leader to hold its Lease after it (a
#: component started again must wait for the old holder's Lease to expire: 15 s)
RECOVERY_TIMEOUT = 90.0


async def api_ready(client: rclient.Client, *, timeout: float = RECOVERY_TIMEOUT) -> None:
    """Wait until kube-apiserver passes ``/readyz``."""

    async def ready() -> bool:
        await client.request("GET", "/readyz", resource="readyz", timeout=2)
        return True

    await wait.until(ready, timeout=timeout, interval=0.1, what="kube-apiserver ready again")


async def leaders_back(
    client: rclient.Client,
    cluster_name: str,
    specs: Sequence[chaos.StoppedComponent],
    since: datetime.datetime,
    *,
    timeout: float = RECOVERY_TIMEOUT,
) -> None:
    """Wait until each component of ``specs`` renewed its leader Lease (``kube-system``, named after
    it) after ``since``; start again, as the kubelet would, each one that exited meanwhile."""

    async def renewed() -> bool:
        chaos.start_exited(cluster_name, specs)
        for spec in specs:
            lease = await client.get(resources.LEASE, spec.name, "kube-system")
            renew = (lease.get("spec") or {}).get("renewTime")
            if not renew or datetime.datetime.fromisoformat(renew) <= since:
                return False
        return True

    names = ", ".join(s.name for s in specs)
    await wait.until(renewed, timeout=timeout, interval=0.5, what=f"{names} leading again")


async def apiserver_restarted(
    client: rclient.Client, cluster_name: str, *, while_down: Callable[[], object] | None = None
) -> None:
    """SIGKILL kube-apiserver, call ``while_down`` (an etcd compaction...), start it again; return
    once it is ready and kube-controller-manager and kube-scheduler lead again (started again if
    they exited)."""
    specs = [chaos.component_spec(cluster_name, name) for name in chaos.LEADER_ELECTED]
    stopped = chaos.stop_component(cluster_name, "kube-apiserver")
    try:
        if while_down is not None:
            while_down()
    finally:
        chaos.start_component(cluster_name, stopped)
    await api_ready(client)
    await leaders_back(client, cluster_name, specs, clock.utcnow())
