"""The child model: components, child kinds and the slots they make (one module per child kind).

- A :class:`Component` is one set of model-server pods with its own names, labels and selector:
  the ``predictor`` now, a ``canary`` later. Two components' selectors never overlap (the selector
  holds the component key).
- A :class:`Child` describes one kind of child, the same shape in every module (KServe style):
  ``key``, the :class:`~mlops_platform.runtime.kinds.Kind` (optional kinds need a CRD, their
  version is resolved from what the cluster serves), the condition type it reports to (several
  children may share one, e.g. ``MonitoringReady``), and pure functions of a :class:`Target`:

  - ``name(target) -> str``: also when not desired, so a stale one is found;
  - ``build(target, ctx) -> dict | None``: the desired object (metadata, spec; ``apiVersion`` is
    the kind's preferred version and the reconciler sets the served one). ``None`` = not desired:
    the reconciler deletes the live one it controls. A disabled feature is a child returning
    ``None``, never an ``if`` in the controller. Owner references are the reconciler's job;
  - ``condition(target, ctx, desired, live) -> ChildCondition`` from the live object's status;
  - ``contribute(target, ctx, live) -> Contribution`` (optional): what it adds to the
    InferenceService status besides its condition (replicas, url, rolled-out model);
  - ``settle(target, desired, live)`` (optional): adjust the desired object to the live one AFTER
    hashing, for fields another controller drives (an HPA's replica count).

  ``per_component``: one per component (Deployment, Service, ...) or one per InferenceService
  (PrometheusRule). ``serving``: whether its condition gates ``Ready``.
- A :class:`Slot` is a child for a target: stable ``key`` (``predictor/deployment``) and condition
  type (``DeploymentAvailable`` for the predictor, ``CanaryDeploymentAvailable`` for a canary).
- Who owns the Deployment's replica count is decided once, by :func:`replica_owner`.

Nothing here does I/O: same inputs, same output.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType

from mlops_platform import __version__
from mlops_platform.api import internal
from mlops_platform.controllers.inferenceservice import alert_settings, conditions, labels
from mlops_platform.controllers.inferenceservice.servers import (
    ServingRuntime,
    ServingRuntimeTable,
    default_table,
)
from mlops_platform.runtime import rbac
from mlops_platform.runtime.caching import kinds
from mlops_platform.runtime.objects import Obj as Obj

Status = conditions.Status
#: a child's condition is a :class:`conditions.Condition` (the one condition type of the status)
ChildCondition = conditions.Condition


#: the operator's own image reference, as the install manifests spell it (``deploy.manifests``,
#: which this layer must not import): the storage initializer runs ``python -m mlops_platform.storage``
DEFAULT_STORAGE_INITIALIZER_IMAGE = f"mlops-platform:{__version__}"
#: ``--scrape-interval``'s default: the Prometheus Operator's own default scrape interval
DEFAULT_SCRAPE_INTERVAL = "30s"


def _no_labels() -> Mapping[str, str]:
    return MappingProxyType({})


class Router(enum.Enum):
    """What splits traffic between the components (``--traffic-router``, per-CR override)."""

    AUTO = "auto"  # Istio if its CRDs are served, else Gateway API with a parent Gateway, else replicas
    ISTIO = "istio"  # a VirtualService with weighted destinations to the components' Services
    GATEWAY_API = "gateway-api"  # an HTTPRoute with weighted backendRefs on the configured Gateway
    REPLICAS = "replicas"  # no mesh: the predictor Service selects both components' pods


@dataclasses.dataclass(frozen=True, slots=True)
class BuildContext:
    """What builders need besides the CR: the runtime table and operator-wide settings."""

    servers: ServingRuntimeTable = dataclasses.field(default_factory=default_table)
    cluster_domain: str = "cluster.local"
    #: PrometheusRule + ServiceMonitor where the Prometheus Operator's CRDs exist (per-CR override)
    monitoring: bool = True
    #: labels put on PrometheusRules and ServiceMonitors (what Prometheus' rule/monitor selectors need)
    monitoring_labels: Mapping[str, str] = dataclasses.field(default_factory=_no_labels)
    #: default alert thresholds (per-CR overrides in v1 spec.monitoring.alerts)
    alerts: alert_settings.AlertSettings = dataclasses.field(default_factory=alert_settings.AlertSettings)
    #: a NetworkPolicy per InferenceService by default (per-CR override)
    network_policy: bool = False
    #: namespaces (by label) besides the InferenceService's own that may reach the serving ports
    #: (mesh or ingress gateways); None: only the own namespace
    ingress_namespace_labels: Mapping[str, str] | None = None
    #: how often Prometheus scrapes a predictor pod, the ServiceMonitor's ``interval``
    #: (``--scrape-interval``; alerts and KEDA's trigger see a change within about two of them)
    scrape_interval: str = DEFAULT_SCRAPE_INTERVAL
    #: the namespace whose pods may scrape the metrics port (kubernetes.io/metadata.name label)
    monitoring_namespace: str = "monitoring"
    #: when set, egress of the predictor pods is limited to these CIDRs plus DNS; empty: unrestricted
    egress_cidrs: tuple[str, ...] = ()
    #: what splits canary traffic (``--traffic-router``; per-CR v1 ``spec.routing.router``, v1alpha1
    #: and v1beta1 ``spec.extensions.traffic.router``)
    router: Router = Router.AUTO
    #: the parent Gateway of HTTPRoutes, ``namespace/name`` (``--gateway``); None: no Gateway API
    gateway: str | None = None
    #: HTTPRoute hostnames are ``<name>.<namespace>.<ingress_domain>`` (``--ingress-domain``)
    ingress_domain: str = "example.com"
    #: the activator's Service, ``NAMESPACE/NAME`` (``--activator``): a KEDA-scaled component at zero
    #: is parked behind it; None: none (a request at zero wakes nothing without a mesh)
    activator: str | None = None
    #: the Prometheus a KEDA ScaledObject's trigger queries (``--keda-prometheus-url``)
    keda_prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    #: requests per second one replica takes before KEDA adds one (``--keda-requests-per-replica``)
    keda_requests_per_replica: float = 10.0
    #: the image of the predictor pods' ``storage-initializer`` init container, which fetches a
    #: remote model (``--storage-initializer-image``; the install manifests pass the operator's image)
    storage_initializer_image: str = DEFAULT_STORAGE_INITIALIZER_IMAGE

    def server(self, isvc: internal.InferenceService) -> ServingRuntime:
        """The runtime of the CR (``KeyError`` naming it if the table lacks it: the reconciler and
        ``why`` run ``servers.validate`` first, which says so as ``spec.predictor.runtime``)."""
        try:
            return self.servers[isvc.framework]
        except KeyError:
            raise KeyError(f"no runtime {isvc.framework!r} in the runtime table") from None


@dataclasses.dataclass(frozen=True, slots=True)
class Component:
    """One set of model-server pods: ``key`` names it (``predictor``), ``model_uri`` is what it serves
    (with the artifact's expected ``model_sha256``, its ``model_format`` and the ``storage`` it is
    fetched from: each component fetches its own model), ``min_replicas``/``max_replicas`` its
    replica bounds (equal: a fixed count, 0 = scaled to zero; ``max > min >= 1``: an HPA owns the
    count, :func:`replica_owner`)."""

    key: str
    model_uri: str
    #: prefix of its children's condition types ("" for the predictor, "Canary" for a canary)
    condition_prefix: str = ""
    min_replicas: int = 1
    max_replicas: int = 1
    #: False: the component is not wanted (its slots build nothing, a live child is deleted)
    present: bool = True
    #: KEDA's ScaledObject CRD is served: ``min_replicas`` 0 with a maximum scales from zero
    scale_to_zero: bool = False
    #: scaled from zero by KEDA with no available replica while an activator is configured: its
    #: Service's traffic goes to the activator, which holds it (``activator.contract``)
    parked: bool = False
    #: the SHA-256 (hex) the storage initializer verifies the fetched artifact against; None: not checked
    model_sha256: str | None = None
    #: the model format (``--format`` of the storage initializer); None: not declared
    model_format: str | None = None
    #: how the storage initializer reaches the model (its Secret, endpoint, region)
    storage: internal.ModelStorage = dataclasses.field(default_factory=internal.ModelStorage)


def predictor(isvc: internal.InferenceService, *, keda: bool = False, parked: bool = False) -> Component:
    """The stable component: the predictor's model URI within its ``minReplicas..maxReplicas``
    (``keda``: KEDA is installed, so ``minReplicas: 0`` autoscales from zero; ``parked``: at zero
    behind the activator)."""
    return Component(
        labels.PREDICTOR,
        isvc.model_uri,
        "",
        isvc.min_replicas,
        isvc.max_replicas,
        scale_to_zero=keda,
        parked=parked,
        model_sha256=isvc.model_sha256,
        model_format=isvc.model_format,
        storage=isvc.storage,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    """What the route carries now: the resolved router (never AUTO) and the weight of each component
    in it (by component key; only weights > 0 are listed, they sum to 100). A router child builds
    its object from this; the replicas router is the predictor Service's selector."""

    router: Router = Router.REPLICAS
    weights: Mapping[str, int] = dataclasses.field(
        default_factory=lambda: MappingProxyType({labels.PREDICTOR: 100})
    )


def components(isvc: internal.InferenceService) -> tuple[Component, ...]:
    """The components of an InferenceService without a canary (the reconciler adds the canary)."""
    return (predictor(isvc),)


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """What a child is built for: the InferenceService, one of its components, every component
    (the predictor first; empty = just ``component``) and the route between them."""

    isvc: internal.InferenceService
    component: Component
    route: Route = Route()
    all_components: tuple[Component, ...] = ()

    @property
    def components(self) -> tuple[Component, ...]:
        return self.all_components or (self.component,)

    def component_named(self, key: str) -> Component | None:
        """The component ``key`` when it is wanted (``present``), else None."""
        return next((c for c in self.components if c.key == key and c.present), None)

    def ordered_weights(self) -> list[tuple[str, int]]:
        """``route.weights`` in component order (the predictor first), then any other key."""
        order = {c.key: i for i, c in enumerate(self.components)}
        weights = self.route.weights
        return [(k, weights[k]) for k in sorted(weights, key=lambda k: order.get(k, len(order)))]


def describe_weights(weights: Mapping[str, int], empty: str = "no backends") -> str:
    """``80 % predictor, 20 % canary`` (a route's weights, for condition messages)."""
    return ", ".join(f"{w} % {k}" for k, w in weights.items()) or empty


class ReplicaOwner(enum.Enum):
    """Who sets the predictor Deployment's ``spec.replicas`` (exactly one of them)."""

    OPERATOR = "operator"  # fixed count: minReplicas (0 = scaled to zero)
    HPA = "hpa"  # maxReplicas > minReplicas >= 1: a HorizontalPodAutoscaler
    KEDA = "keda"  # minReplicas 0, maxReplicas >= 1, KEDA installed: a ScaledObject (from zero)


def replica_owner(component: Component) -> ReplicaOwner:
    """The single statement of who owns a component's replica count; children read it, never
    re-derive it."""
    if component.max_replicas > component.min_replicas >= 1:
        return ReplicaOwner.HPA
    if component.min_replicas == 0 and component.max_replicas >= 1 and component.scale_to_zero:
        return ReplicaOwner.KEDA  # never both: KEDA refuses a ScaledObject whose target has an HPA
    return ReplicaOwner.OPERATOR


@dataclasses.dataclass(frozen=True, slots=True)
class Replicas:
    replicas: int
    ready: int
    desired: int


@dataclasses.dataclass(frozen=True, slots=True)
class Contribution:
    """What a child adds to the InferenceService status besides its condition."""

    replicas: Replicas | None = None
    url: str | None = None
    #: the model URI actually rolled out (all replicas updated and available), when known
    rolled_out_model: str | None = None


NameFn = Callable[[Target], str]
BuildFn = Callable[[Target, BuildContext], Obj | None]
#: None: the slot reports no condition (a router child of a router not in use)
ConditionFn = Callable[[Target, BuildContext, Obj | None, Obj | None], ChildCondition | None]
ContributeFn = Callable[[Target, BuildContext, Obj | None], Contribution]
SettleFn = Callable[[Target, Obj, Obj | None], None]


@dataclasses.dataclass(frozen=True, slots=True)
class Child:
    """One child kind: where it lives in the API and its pure functions (see the module doc)."""

    key: str
    kind: kinds.Kind
    condition_type: str
    name: NameFn
    build: BuildFn
    condition: ConditionFn
    contribute: ContributeFn | None = None
    settle: SettleFn | None = None
    serving: bool = True
    per_component: bool = True


@dataclasses.dataclass(frozen=True, slots=True)
class Slot:
    """A child for one target: the unit the reconciler syncs."""

    child: Child
    target: Target

    @property
    def key(self) -> str:
        c = self.child
        return f"{self.target.component.key}/{c.key}" if c.per_component else c.key

    @property
    def condition_type(self) -> str:
        prefix = self.target.component.condition_prefix if self.child.per_component else ""
        return prefix + self.child.condition_type

    @property
    def name(self) -> str:
        return self.child.name(self.target)


def slots(
    isvc: internal.InferenceService,
    children: tuple[Child, ...],
    comps: tuple[Component, ...] | None = None,
    route: Route | None = None,
) -> list[Slot]:
    """Every slot of ``isvc``: per-component children for each component (the predictor first),
    then the others once. ``comps`` defaults to :func:`components` (no canary)."""
    comps = comps or components(isvc)
    route = route or Route()
    targets = [Target(isvc, comp, route, comps) for comp in comps]
    out = [Slot(c, t) for t in targets for c in children if c.per_component]
    out += [Slot(c, targets[0]) for c in children if not c.per_component]
    return out


# -- helpers shared by the child modules ---------------------------------------------------------


#: what owning a child kind takes: watch it (owns), server-side apply it (an apply that creates
#: needs ``create`` as well as ``patch``), repair it (``update``) and delete it when not desired
CHILD_VERBS = ("list", "watch", "create", "patch", "update", "delete")


def child_rbac(kind: kinds.Kind, why: str) -> rbac.Rule:
    """Declare the permissions a child kind needs (next to its module, like every declaration)."""
    return rbac.requires(kind.group, kind.plural, CHILD_VERBS, why=why)


def enabled(per_object: bool | None, operator_default: bool) -> bool:
    """A feature switch: the InferenceService's own setting, else the operator's default."""
    return operator_default if per_object is None else per_object


def service_name(target: Target) -> str:
    """``<name>``: children of the whole InferenceService (NetworkPolicy, monitoring) are named so."""
    return target.isvc.name


def component_name(target: Target) -> str:
    """``<name>-<component>``: the Deployment, Service and HPA of a component share it."""
    return component_name_of(target.isvc, target.component.key)


def component_name_of(isvc: internal.InferenceService, key: str) -> str:
    """``<name>-<key>`` (``predictor`` or ``canary``: both fit 63 characters, see labels)."""
    return f"{isvc.name}-{key}"


def metadata(
    target: Target,
    ctx: BuildContext,
    name: str,
    annotations: Mapping[str, str] | None = None,
    extra_labels: Mapping[str, str] | None = None,
    *,
    per_component: bool = True,
) -> Obj:
    """``metadata`` of a child: name, namespace, the common labels and optional annotations.
    A child of the whole InferenceService (``per_component=False``) carries no component label."""
    common = labels.child_labels(target, ctx.server(target.isvc).server)
    if not per_component:
        common.pop(labels.COMPONENT)
        common[labels.K8S_COMPONENT] = labels.SERVICE_COMPONENT
    meta: Obj = {
        "name": name,
        "namespace": target.isvc.namespace,
        # extra labels (operator settings) never replace ours: the cache selects children by them
        "labels": {**(extra_labels or {}), **common},
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def not_found(type_: str, kind: kinds.Kind, name: str) -> ChildCondition:
    """The condition of a desired child that does not exist (yet)."""
    return ChildCondition(type_, "Unknown", "Pending", f"{kind.kind} {name} does not exist yet")
