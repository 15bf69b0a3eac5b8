"""NetworkPolicies are really enforced on the real node (kube-router's network-policy controller):
a policy blocks the peers it does not allow and lets through the ones it does, by pod IP and through
a Service's ClusterIP; an egress policy blocks what a pod sends."""

from __future__ import annotations

from typing import Any

from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import realnode as rn
from mlops_platform.testing.plugin import temporary_namespace

Kubectl = Any
NETWORK_POLICY = rclient.Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy")


def _policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


async def _eventually(kubectl: Kubectl, ns: str, pod: str, url: str, reach: bool, what: str) -> None:
    await rn.eventually_reaches(kubectl, ns, pod, url, reach, what)


async def test_policies_block_what_they_do_not_allow_and_let_through_what_they_do(
    admin_client: rclient.Client, namespace: str, kubectl: Kubectl
) -> None:
    server = namespace
    async with (
        temporary_namespace(admin_client, "np-friend") as friend,
        temporary_namespace(admin_client, "np-other") as other,
    ):
        await admin_client.create(resources.POD, rn.server("srv", {"app": "srv"}), server)
        svc = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "srv"},
            "spec": {"selector": {"app": "srv"}, "ports": [{"port": 80, "targetPort": 8080}]},
        }
        cluster_ip = (await admin_client.create(resources.SERVICE, svc, server))["spec"]["clusterIP"]
        for ns in (friend, other):
            await admin_client.create(resources.POD, rn.server("client"), ns)
        pod = await rn.wait_pod(admin_client, server, "srv", rn.is_ready, what="Ready")
        for ns in (friend, other):
            await rn.wait_pod(admin_client, ns, "client", rn.is_ready, what="Ready")
        by_ip, by_service = f"http://{pod['status']['podIP']}:8080/", f"http://{cluster_ip}/"
        for ns in (friend, other):  # no policy: everything is allowed, once kube-proxy has the Service
            for url in (by_ip, by_service):
                await _eventually(kubectl, ns, "client", url, True, f"no policy: {ns} reaches {url}")

        # deny all ingress to the server's namespace, then allow only the friend's namespace on 8080
        await admin_client.create(
            NETWORK_POLICY, _policy("deny", {"podSelector": {}, "policyTypes": ["Ingress"]}), server
        )
        await _eventually(kubectl, friend, "client", by_ip, False, "deny-all blocks the friend")
        await _eventually(kubectl, other, "client", by_service, False, "deny-all blocks through the Service")
        allow = {
            "podSelector": {"matchLabels": {"app": "srv"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": friend}}}],
                    "ports": [{"port": 8080, "protocol": "TCP"}],
                }
            ],
        }
        await admin_client.create(NETWORK_POLICY, _policy("allow-friend", allow), server)
        await _eventually(kubectl, friend, "client", by_ip, True, "the friend is let through by pod IP")
        await _eventually(
            kubectl, friend, "client", by_service, True, "the friend is let through the Service"
        )
        await _eventually(kubectl, other, "client", by_ip, False, "the other namespace stays blocked")
        await _eventually(kubectl, other, "client", by_service, False, "... through the Service too")

        # egress: the friend may send nothing any more
        deny_egress = _policy("deny-egress", {"podSelector": {}, "policyTypes": ["Egress"]})
        await admin_client.create(NETWORK_POLICY, deny_egress, friend)
        await _eventually(
            kubectl, friend, "client", by_ip, False, "an egress policy blocks what the friend sends"
        )

        # the policies gone, traffic flows again (rules follow the objects, both ways)
        for name in ("deny", "allow-friend"):
            await admin_client.delete(NETWORK_POLICY, name, server)
        await admin_client.delete(NETWORK_POLICY, "deny-egress", friend)
        await _eventually(
            kubectl, other, "client", by_ip, True, "no policy: the other namespace reaches it again"
        )
