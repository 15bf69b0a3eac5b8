"""Generic controller runtime with client-go / controller-runtime semantics.

It imports nothing else of mlops_platform (enforced by import-linter). Its layout shows its layers,
each importing only those below it (also enforced):

- ``control``: controller, manager, leaderelection, sharding, reconcile, predicates, childsync
- ``webhook``: certs, keeper, server (TLS webhooks with self-managed certificates)
- ``caching``: informer, store, cache, kinds, crdwatch
- ``observability``: events, logs, metrics
- ``queue``: workqueue, delaying_queue, rate_limiting_queue, ratelimiter, workqueue_metrics
- ``transport``: client, resources, apiextensions, httpserver
- utilities at the top level, importing nothing else of the runtime (bar ``diff`` -> ``quantity``):
  background, clock, diff, generated, objects, quantity, rbac, wait

Every module stays reachable as ``mlops_platform.runtime.<module>`` (``from mlops_platform.runtime
import client, manager``), as before the split; code inside the package imports the full path.
"""

from mlops_platform.runtime import clock, diff, generated, objects, quantity, rbac, wait
from mlops_platform.runtime.caching import cache, crdwatch, informer, kinds, store
from mlops_platform.runtime.control import (
    childsync,
    controller,
    leaderelection,
    manager,
    predicates,
    reconcile,
    sharding,
)
from mlops_platform.runtime.observability import events, logs, metrics
from mlops_platform.runtime.queue import (
    delaying_queue,
    rate_limiting_queue,
    ratelimiter,
    workqueue,
    workqueue_metrics,
)
from mlops_platform.runtime.transport import apiextensions, client, httpserver, resources

__all__ = [
    "apiextensions",
    "cache",
    "childsync",
    "client",
    "clock",
    "controller",
    "crdwatch",
    "delaying_queue",
    "diff",
    "events",
    "generated",
    "httpserver",
    "informer",
    "kinds",
    "leaderelection",
    "logs",
    "manager",
    "metrics",
    "objects",
    "predicates",
    "quantity",
    "rate_limiting_queue",
    "ratelimiter",
    "rbac",
    "reconcile",
    "resources",
    "sharding",
    "store",
    "wait",
    "workqueue",
    "workqueue_metrics",
]
