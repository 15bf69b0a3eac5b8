"""Labels on every child of an InferenceService, and the predictor's selector.

Contract:
- :func:`child_labels` is what every child (and the predictor pods) carries: the seed convention
  ``app: <name>``, our own ``mlops.platform/*`` keys and the recommended ``app.kubernetes.io/*``
  keys (name = the model server software, instance = the InferenceService, as operators such as
  Strimzi and prometheus-operator do), and the InferenceService's shard bucket
  (``runtime.control.partitioning.BUCKET_LABEL``): a sharded replica watches only the children of its
  partitions. The bucket is a function of namespace and name alone, so it never changes.
- :func:`selector` uses only labels that never change for the life of the CR (the
  InferenceService name and the component). A Deployment's selector is immutable: a framework
  change must roll out new pods, never fail with "field is immutable". As it holds the component,
  two components' selectors never overlap; :func:`service_selector` (the name alone) selects the
  pods of every component of one InferenceService and of no other.
- ``<name>-predictor`` must be a DNS-1035 label (63 characters), so InferenceService names are
  limited by the API (``v1alpha1.MAX_NAME_LENGTH``); label values have the same limit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlops_platform.api import internal, v1alpha1
from mlops_platform.runtime.control import partitioning
from mlops_platform.runtime.control.reconcile import Request

if TYPE_CHECKING:  # children.base imports this module
    from mlops_platform.controllers.inferenceservice.children.base import Target

APP = "app"
INFERENCESERVICE = f"{v1alpha1.GROUP}/inferenceservice"
FRAMEWORK = f"{v1alpha1.GROUP}/framework"
COMPONENT = f"{v1alpha1.GROUP}/component"
K8S_NAME = "app.kubernetes.io/name"
K8S_INSTANCE = "app.kubernetes.io/instance"
K8S_COMPONENT = "app.kubernetes.io/component"
K8S_MANAGED_BY = "app.kubernetes.io/managed-by"
K8S_PART_OF = "app.kubernetes.io/part-of"

#: app.kubernetes.io/managed-by: the operator, named as in the field manager of its writes
MANAGER = v1alpha1.FIELD_MANAGER
PART_OF = "mlops-platform"
PREDICTOR = "predictor"
#: the candidate component of a canary rollout (``<name>-canary``: as long as ``<name>-predictor``)
CANARY = "canary"
#: app.kubernetes.io/component of children of the whole InferenceService (PrometheusRule, ...)
SERVICE_COMPONENT = "inferenceservice"
#: label selector of everything this operator creates (to restrict informers to our children)
MANAGED_BY_SELECTOR = f"{K8S_MANAGED_BY}={MANAGER}"

PREDICTOR_SUFFIX = f"-{PREDICTOR}"
# the API limits names so that every child name and label value fits in 63 characters
assert v1alpha1.MAX_NAME_LENGTH + len(PREDICTOR_SUFFIX) <= 63
assert len(CANARY) <= len(PREDICTOR)

#: Event annotation: the id of the reconcile that recorded it (its JSON log line's ``reconcile_id``)
RECONCILE_ID_ANNOTATION = f"{v1alpha1.GROUP}/reconcile-id"

#: pod template annotation carrying the model URI the pods were started with
MODEL_URI_ANNOTATION = f"{v1alpha1.GROUP}/model-uri"


def selector(isvc: internal.InferenceService, component: str = PREDICTOR) -> dict[str, str]:
    """The pods of one component: stable for the life of the CR."""
    return {INFERENCESERVICE: isvc.name, COMPONENT: component}


def service_selector(isvc: internal.InferenceService) -> dict[str, str]:
    """The pods of every component of ``isvc`` (and of nothing else)."""
    return {INFERENCESERVICE: isvc.name}


def selector_string(isvc: internal.InferenceService) -> str:
    """The predictor's :func:`selector` as a label selector string (``status.selector``, scale)."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector(isvc).items()))


def child_labels(target: Target, server: str) -> dict[str, str]:
    """All labels of a component's child; ``server`` is the runtime's software (``tritonserver``)."""
    isvc, component = target.isvc, target.component.key
    return {
        APP: isvc.name,
        **selector(isvc, component),
        FRAMEWORK: isvc.framework,
        K8S_NAME: server,
        K8S_INSTANCE: isvc.name,
        K8S_COMPONENT: component,
        K8S_MANAGED_BY: MANAGER,
        K8S_PART_OF: PART_OF,
        partitioning.BUCKET_LABEL: bucket(isvc),
    }


def bucket(isvc: internal.InferenceService) -> str:
    """The shard bucket of ``isvc`` (:func:`~mlops_platform.runtime.control.partitioning.bucket_of`)."""
    return str(partitioning.bucket_of(Request(isvc.namespace, isvc.name)))
