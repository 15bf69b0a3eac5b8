"""Built-in resources the runtime and its users reach without discovery."""

from mlops_platform.runtime.transport.client import Resource

NAMESPACE = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODE = Resource("", "v1", "nodes", "Node", namespaced=False)
POD = Resource("", "v1", "pods", "Pod")
SERVICE = Resource("", "v1", "services", "Service")
CONFIG_MAP = Resource("", "v1", "configmaps", "ConfigMap")
SECRET = Resource("", "v1", "secrets", "Secret")
SERVICE_ACCOUNT = Resource("", "v1", "serviceaccounts", "ServiceAccount")
DEPLOYMENT = Resource("apps", "v1", "deployments", "Deployment")
HPA = Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
NETWORK_POLICY = Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")
LEASE = Resource("coordination.k8s.io", "v1", "leases", "Lease")
EVENT = Resource("events.k8s.io", "v1", "events", "Event")
ENDPOINT_SLICE = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
CLUSTER_ROLE = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDING = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False
)
CRD = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False
)
