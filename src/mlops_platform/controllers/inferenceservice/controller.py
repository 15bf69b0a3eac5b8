"""Wire the InferenceService reconciler into a manager: what it watches and how."""

from __future__ import annotations

from typing import Any

from mlops_platform.controllers.inferenceservice import (
    analysis_measure,
    analysis_queries,
    analysis_run,
    children,
    labels,
    pods_and_slices,
    reconciler,
)
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.runtime import rbac
from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.control import controller as rcontroller
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.control import predicates
from mlops_platform.runtime.control.reconcile import Request
from mlops_platform.runtime.queue import workqueue
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.transport import shape as rshape

NAME = "inferenceservice"
RBAC = (
    rbac.requires("mlops.platform", "inferenceservices", ["list", "watch"], why="the primary kind (for_)"),
    rbac.requires("mlops.platform", "inferenceservices/status", ["patch"], why="status written by apply"),
    rbac.requires(
        "mlops.platform",
        "inferenceservices",
        ["patch"],
        why="sharding: the shard-bucket label a sharded replica's watch selects (runtime.control.labeler)",
    ),
    rbac.requires("", "pods", ["list", "watch"], why="pod failures (CrashLoopBackOff) shown on the status"),
    rbac.requires(
        "discovery.k8s.io",
        "endpointslices",
        ["list", "watch"],
        why="a canary enters the route only once its Service has ready endpoints",
    ),
)


def _pod_to_service(pod: dict[str, Any]) -> list[Request]:
    return [Request(*key.split("/", 1)) for key in pods_and_slices.pod_index(pod)]


def setup(
    mgr: rmanager.Manager,
    *,
    workers: int = 16,
    settings: base.BuildContext | None = None,
    prometheus: analysis_queries.Querier | None = None,
) -> reconciler.InferenceServiceReconciler:
    """Register the controller. The cache holds only what it needs: pods and children it labelled.

    Children of optional kinds (their CRDs may be absent) are watched while their CRDs exist.
    ``settings`` are the operator-wide defaults (the model-server table among them); ``prometheus``
    the query client of the canary analyses (None: their measurements hold, saying so). Its
    measurements run beside the workers; each enqueues its InferenceService when it is done.
    """
    ctx = settings or base.BuildContext()
    _cache_what_the_reconciler_reads(mgr.cache)
    recorder = mgr.event_recorder("mlops-platform", correlation_annotation=labels.RECONCILE_ID_ANNOTATION)
    measurer = analysis_measure.Measurer(prometheus)
    rec = reconciler.InferenceServiceReconciler(
        mgr.cache, mgr.client, recorder, mgr.optional_kinds, ctx, analysis_run.AnalysisRun(measurer)
    )
    ctl = _controller(mgr, rec, workers)
    mgr.add(ctl)
    measurer.wake = lambda key: ctl.queue.add(Request(*key))

    def denial_changed(_: rclient.Resource, old: Exception | None, new: Exception | None) -> None:
        # a reconcile that ran before an informer's first 403 (or after its last) would otherwise
        # stand: nothing else enqueues it, as a denied informer delivers no event
        if reconciler.denied(old) != reconciler.denied(new):
            ctl.enqueue_all()

    mgr.cache.add_error_listener(denial_changed)
    # an Event is written after the reconcile that made it: a refusal (or the end of one) must bring
    # that namespace's InferenceServices back, or "cannot create events" never shows
    recorder.add_denial_listener(lambda namespace, _: ctl.enqueue_all(lambda req: req.namespace == namespace))
    return rec


def _cache_what_the_reconciler_reads(cache: rcache.Cache) -> None:
    """Children and pods carry their InferenceService's shard bucket: a sharded replica caches only
    its partitions' (scoped); the InferenceServices themselves are cached whole. Every object is
    decoded into what the reconciler reads (rshape: the rest, managedFields and most of a pod's spec
    among it, is skipped by the parser, never built)."""
    cache.shape(reconciler.ISVC, rshape.SPEC_AND_STATUS)
    cache.restrict(resources.POD, labels.INFERENCESERVICE, scoped=True)
    cache.shape(resources.POD, pods_and_slices.POD_SHAPE)
    cache.transform(resources.POD, pods_and_slices.slim_pod)
    cache.informer_for(resources.POD).store.add_indexers(
        {pods_and_slices.POD_INDEX: pods_and_slices.pod_index}
    )
    # only the canary Services' EndpointSlices (label-selected by the API server: none without a
    # canary), slimmed to their ready count, which gates the candidate's entry into the route
    cache.restrict(resources.ENDPOINT_SLICE, pods_and_slices.CANARY_SLICES, scoped=True)
    cache.shape(resources.ENDPOINT_SLICE, pods_and_slices.SLICE_SHAPE)
    cache.transform(resources.ENDPOINT_SLICE, pods_and_slices.slim_slice)
    slices = cache.informer_for(resources.ENDPOINT_SLICE).store
    slices.add_indexers({pods_and_slices.POD_INDEX: pods_and_slices.pod_index})
    for child in children.CHILDREN:
        for version in child.kind.versions:  # an optional kind's served version is known later
            cache.restrict(child.kind.resource(version), labels.MANAGED_BY_SELECTOR, scoped=True)
            cache.shape(child.kind.resource(version), rshape.SPEC_AND_STATUS)


def _controller(
    mgr: rmanager.Manager, rec: reconciler.InferenceServiceReconciler, workers: int
) -> rcontroller.Controller:
    """What enqueues a reconcile: the InferenceServices, their pods' failures, the canary's ready
    endpoints and every owned child."""
    builder = (
        mgr.builder(NAME)
        # our status writes bump resourceVersion, not generation: they do not re-trigger reconciles
        # (another writer's status edit does: it is written back).
        # A new InferenceService or a spec change (a user's intent) goes before the status changes
        # of children (observations): under a burst, children are created first, as fast as the
        # API server allows, and statuses follow (docs/design.md, "Queue priorities")
        .for_(
            reconciler.ISVC,
            # first, so that it sees every event (it passes them all): it forgets our status
            # writes once the cache holds them
            rec.own_status,
            predicates.any_of(
                predicates.generation_changed(),
                predicates.labels_changed(),
                rec.own_status.foreign_status(),  # another writer's status edit: written back
            ),
            priority=workqueue.HIGH,
        )
        # a stable pod matters only through its failure (CrashLoopBackOff...): its other status
        # changes (scheduled, started, ready) are seen through the Deployment's status, once; a
        # canary pod's readiness and model also decide its entry into the route
        .watches(resources.POD, _pod_to_service, predicates.projection_changed(pods_and_slices.pod_signal))
        .watches(
            resources.ENDPOINT_SLICE,
            _pod_to_service,
            predicates.projection_changed(pods_and_slices.ready_endpoints),
        )
        .with_options(max_concurrent_reconciles=workers)
    )
    for kind in dict.fromkeys(c.kind for c in children.CHILDREN):
        builder.owns(kind, rec.own_writes)
    return builder.build(rec)
