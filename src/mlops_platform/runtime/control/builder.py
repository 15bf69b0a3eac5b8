"""The controller builder (controller-runtime ``builder``): declare what a controller watches and how
it runs, then :meth:`Builder.build` the :class:`~mlops_platform.runtime.control.controller.Controller`::

    ctrl = (
        builder.Builder("inferenceservice", cache, metrics)
        .for_(ISVC, predicates.generation_changed())
        .owns(resources.DEPLOYMENT)
        .watches(resources.CONFIG_MAP, map_config_to_services)
        .with_options(max_concurrent_reconciles=4)
        .build(reconciler)
    )

Contract:
- every method returns the builder; misconfiguration is collected, and ``build`` raises
  :class:`BuildError` listing EVERY one at once (controller-runtime stops at the first);
- exactly one ``for_``; ``owns`` of an optional :class:`~mlops_platform.runtime.caching.kinds.Kind`
  needs the manager's builder (its ``optional_kinds``);
- ``build`` registers the event handlers on the cache's informers at once; it does not register the
  controller with the manager (pass the result to ``Manager.add``). What the watches enqueue is the
  controller's contract (:mod:`~mlops_platform.runtime.control.controller`).
"""

from __future__ import annotations

from mlops_platform.runtime.caching import cache as rcache
from mlops_platform.runtime.caching import crdwatch, kinds
from mlops_platform.runtime.control import controller as rcontroller
from mlops_platform.runtime.control import predicates as rpredicates
from mlops_platform.runtime.control.reconcile import Reconciler, Request
from mlops_platform.runtime.observability import metrics as rmetrics
from mlops_platform.runtime.queue import ratelimiter, workqueue
from mlops_platform.runtime.transport import client as rclient

__all__ = ["BuildError", "Builder"]


class BuildError(ValueError):
    pass


class Builder:
    """Declares one controller, like controller-runtime's ``builder.Builder``.

    ``Builder(name, cache, metrics)`` ~ ``ctrl.NewControllerManagedBy(mgr).Named(name)`` (use
    :meth:`Manager.builder <mlops_platform.runtime.manager.Manager.builder>` to get one bound to the
    manager). Every method returns the builder; misconfiguration is collected and raised by
    :meth:`build`, all at once. Unlike controller-runtime, ``build`` does not register the
    controller with the manager: pass the result to ``Manager.add``.
    """

    def __init__(
        self,
        name: str,
        cache: rcache.Cache,
        metrics: rmetrics.Metrics | None = None,
        optional_kinds: crdwatch.OptionalKinds | None = None,
    ) -> None:
        self._name = name
        self._cache = cache
        self._metrics = metrics
        self._kinds = optional_kinds
        self._for: list[rcontroller.Watch] = []
        self._watches: list[rcontroller.Watch] = []
        self._owns: list[tuple[rclient.Resource, tuple[rpredicates.Predicate, ...]]] = []
        self._owns_optional: list[tuple[kinds.Kind, rpredicates.Predicate]] = []
        self._max_concurrent = 1
        self._rate_limiter: ratelimiter.RateLimiter[Request] | None = None
        self._errors: list[str] = []

    def for_(
        self, resource: rclient.Resource, *predicates: rpredicates.Predicate, priority: int = workqueue.NORMAL
    ) -> Builder:
        """The reconciled kind: its events enqueue the object itself, after ``predicates``.

        ~ ``Builder.For(obj, builder.WithPredicates(...))`` (``handler.EnqueueRequestForObject``);
        exactly one is required. ``priority``: of its change events in the queue (e.g.
        :data:`~.workqueue.HIGH`: a new object or a spec change goes before the children's status
        changes; an informer's initial list and resyncs stay at ``LOW``); controller-runtime's
        priority queue has it per handler (``handler.WithLowPriorityWhenUnchanged``).
        """
        self._for.append(rcontroller.Watch(resource, None, rpredicates.all_of(*predicates), priority))
        return self

    def owns(self, target: rclient.Resource | kinds.Kind, *predicates: rpredicates.Predicate) -> Builder:
        """A child kind: its events enqueue their controller owner of the ``for_`` kind.

        ~ ``Builder.Owns(obj, builder.WithPredicates(...))`` (``handler.EnqueueRequestForOwner``
        with ``OnlyControllerOwner``). ``target`` is a resource or a :class:`~.kinds.Kind`; an
        optional kind is watched only while its CRD is served (controller-runtime: a watch added
        with ``Controller.Watch`` after start), which needs the manager's builder.
        """
        if isinstance(target, kinds.Kind):
            if not target.optional:
                target = target.resource()
            elif self._kinds is None:
                self._errors.append(f"owns({target.kind}): an optional kind needs the manager's builder")
                return self
            else:
                self._owns_optional.append((target, rpredicates.all_of(*predicates)))
                return self
        self._owns.append((target, predicates))
        return self

    def watches(
        self, resource: rclient.Resource, mapper: rcontroller.Mapper, *predicates: rpredicates.Predicate
    ) -> Builder:
        """Any other kind: its events enqueue the requests ``mapper(obj)`` returns.

        ~ ``Builder.Watches(obj, handler.EnqueueRequestsFromMapFunc(fn), builder.WithPredicates(...))``.
        """
        if not callable(mapper):
            self._errors.append(f"watches({resource.kind}): mapper is not callable")
        self._watches.append(rcontroller.Watch(resource, mapper, rpredicates.all_of(*predicates)))
        return self

    def with_options(
        self,
        *,
        max_concurrent_reconciles: int = 1,
        rate_limiter: ratelimiter.RateLimiter[Request] | None = None,
    ) -> Builder:
        """Workers and retry policy: ~ ``Builder.WithOptions(controller.Options{MaxConcurrentReconciles,
        RateLimiter})``; the default limiter is client-go's ``DefaultControllerRateLimiter``.
        """
        if max_concurrent_reconciles < 1:
            self._errors.append(f"max_concurrent_reconciles must be >= 1, got {max_concurrent_reconciles}")
        self._max_concurrent = max_concurrent_reconciles
        self._rate_limiter = rate_limiter
        return self

    def build(self, reconciler: Reconciler) -> rcontroller.Controller:
        """The :class:`~.controller.Controller` running ``reconciler``, ~ ``Builder.Build(reconciler)``.

        Raises :class:`BuildError` listing every misconfiguration (controller-runtime stops at the
        first). Registers the event handlers on the cache's informers at once.
        """
        errors = list(self._errors)
        if not self._name:
            errors.append("a controller needs a name")
        if len(self._for) != 1:
            errors.append(f"exactly one for_() is required, got {len(self._for)}")
        if not callable(getattr(reconciler, "reconcile", None)):
            errors.append("the reconciler has no reconcile(request) method")
        if errors:
            raise BuildError(f"controller {self._name!r}: " + "; ".join(errors))
        primary = self._for[0]
        watches = [primary, *self._watches]
        for res, ps in self._owns:
            watches.append(
                rcontroller.Watch(res, rcontroller.owner_mapper(primary.resource), rpredicates.all_of(*ps))
            )
        ctrl = rcontroller.Controller(
            self._name,
            self._cache,
            watches,
            reconciler,
            self._max_concurrent,
            self._rate_limiter,
            self._metrics,
        )
        if self._kinds is not None and self._owns_optional:
            ctrl.follow(self._kinds, self._owns_optional)
        return ctrl
