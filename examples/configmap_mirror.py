"""An example controller built only on ``mlops_platform.runtime``: mirror labelled ConfigMaps.

For every ConfigMap labelled ``example.mlops.platform/mirror=true`` it keeps a child ConfigMap
``<name>-mirror`` with the same data, owned by the parent (so the garbage collector deletes it with
the parent). Edits or deletion of the mirror are repaired, because ``owns()`` maps the child back to
its parent. Run it against any cluster::

    python examples/configmap_mirror.py --kubeconfig "$KUBECONFIG" [--namespace NS] [--leader-elect]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

# users import the runtime's modules from the package itself (its layer subpackages are internal)
from mlops_platform.runtime import client as rclient
from mlops_platform.runtime import manager as rmanager
from mlops_platform.runtime import resources
from mlops_platform.runtime.control.reconcile import Request, Result

LABEL = "example.mlops.platform/mirror"
FIELD_MANAGER = "configmap-mirror"
log = logging.getLogger("example.configmap_mirror")


def desired_mirror(parent: dict[str, Any]) -> dict[str, Any]:
    """Pure: the mirror ConfigMap for ``parent``."""
    meta = parent["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{meta['name']}-mirror",
            "namespace": meta["namespace"],
            "labels": {"example.mlops.platform/mirror-of": meta["name"]},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "data": dict(parent.get("data") or {}),
    }


class MirrorReconciler:
    def __init__(self, mgr: rmanager.Manager, fail_names: frozenset[str] = frozenset()) -> None:
        self.mgr = mgr
        self.fail_names = fail_names  # for tests: these parents always fail
        self.reconciles = 0

    async def reconcile(self, request: Request) -> Result:
        self.reconciles += 1
        if request.name in self.fail_names:
            raise RuntimeError(f"{request.name} is configured to fail")
        parent = self.mgr.cache.get(resources.CONFIG_MAP, request.namespace, request.name)
        if parent is None or (parent["metadata"].get("labels") or {}).get(LABEL) != "true":
            return Result()  # gone or not ours: the GC removes the mirror
        want = desired_mirror(parent)
        live = self.mgr.cache.get(resources.CONFIG_MAP, request.namespace, want["metadata"]["name"])
        if live is not None and live.get("data") == want["data"] and _owned_by(live, parent):
            return Result()  # no write when nothing changed
        await self.mgr.client.apply(resources.CONFIG_MAP, want, field_manager=FIELD_MANAGER)
        log.info("mirror applied", extra={"namespace": request.namespace, "name": request.name})
        return Result()


def _owned_by(child: dict[str, Any], parent: dict[str, Any]) -> bool:
    refs = child["metadata"].get("ownerReferences") or []
    return any(r.get("uid") == parent["metadata"]["uid"] and r.get("controller") for r in refs)


def setup(
    mgr: rmanager.Manager, *, workers: int = 2, fail_names: frozenset[str] = frozenset()
) -> MirrorReconciler:
    reconciler = MirrorReconciler(mgr, fail_names)
    ctrl = (
        mgr.builder("configmap-mirror")
        .for_(resources.CONFIG_MAP)
        .owns(resources.CONFIG_MAP)
        .with_options(max_concurrent_reconciles=workers)
        .build(reconciler)
    )
    mgr.add(ctrl)
    return reconciler


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig")
    p.add_argument("--namespace")
    p.add_argument("--leader-elect", action="store_true")
    p.add_argument("--leader-election-namespace", default="default")
    p.add_argument("--lease-duration", type=float, default=15.0)
    p.add_argument("--renew-deadline", type=float, default=10.0)
    p.add_argument("--retry-period", type=float, default=2.0)
    p.add_argument("--identity")
    p.add_argument("--health-port", type=int, default=0)
    p.add_argument("--metrics-port", type=int, default=0)
    args = p.parse_args()
    from mlops_platform.runtime import logs

    logs.setup_logging()

    async def run() -> None:
        async with rclient.Client.from_kubeconfig(args.kubeconfig) as c:
            opts = rmanager.Options(
                namespace=args.namespace,
                leader_election=args.leader_elect,
                leader_election_id="configmap-mirror",
                leader_election_namespace=args.leader_election_namespace,
                lease_duration=args.lease_duration,
                renew_deadline=args.renew_deadline,
                retry_period=args.retry_period,
                health_probe_address=("127.0.0.1", args.health_port),
                metrics_address=("127.0.0.1", args.metrics_port),
            )
            if args.identity:
                opts.identity = args.identity
            mgr = rmanager.Manager(c, opts)
            setup(mgr)
            await mgr.run_until_signal()

    asyncio.run(run())


if __name__ == "__main__":
    main()
