"""The conversion webhook works under exactly its generated RBAC: as the operator's ServiceAccount,
bound to the generated roles only, it creates its certificate Secret, reads and rotates it by name,
injects the CA bundle into the InferenceService CRD (get/patch by name), and the API server converts
through it. Every request it made is covered by the declared rules, and none was denied.

(The reconciler's e2e suites prove the other rules; these are the webhook's, which an in-process
operator without a webhook never uses.)"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from mlops_platform.api import crd
from mlops_platform.deploy import rbac as deploy_rbac
from mlops_platform.runtime import rbac
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import identity, isvc, ports, wait, webhook
from mlops_platform.webhooks import serve


async def test_the_webhook_runs_under_its_generated_rbac(
    kube_cluster: Path, admin_client: rclient.Client, namespace: str
) -> None:
    objs = deploy_rbac.objects(namespace=namespace, watch_namespaces=[namespace], name=f"op-{namespace}")
    cluster_scoped = [o for o in objs if "namespace" not in o["metadata"]]
    await identity.apply_objects(admin_client, objs)
    token = await identity.token_for(admin_client, namespace, deploy_rbac.NAME)
    c = identity.client_with_token(kube_cluster, token)
    port = ports.free_port()
    url = f"https://127.0.0.1:{port}/convert"
    hook = serve.ConversionWebhook(
        c,
        serve.Options(
            port=port,
            secret=(namespace, serve.SECRET[1]),  # the generated Role names this Secret
            policy=serve.policy_for_tests(600),
            period=5.0,
        ),
    )
    try:
        async with webhook.paused(admin_client):
            await crd.install(admin_client, webhook_url=url)
            task = asyncio.create_task(hook.run())
            try:
                await asyncio.wait_for(hook.ready.wait(), 60)

                async def ours() -> bool:
                    return await webhook.ca_bundle(admin_client) == await webhook.stored_bundle(
                        admin_client, (namespace, serve.SECRET[1])
                    )

                await wait.until(ours, timeout=60, what="the webhook's own bundle in the CRD")
                # and the API server's conversion client has taken it (a moment later: it failed a
                # create with the bundle before, 'x509: ECDSA verification failure', once)
                await webhook.until_converting(admin_client)
                # the API server converts through it: v1alpha1 written, stored and read as v1
                obj = isvc.manifest("m", modelUri="s3://models/m/1", framework="triton")
                await admin_client.create(isvc.RESOURCE, obj, namespace)
                stored = await admin_client.get(crd.RESOURCE, "m", namespace)
                assert stored["spec"]["predictor"]["runtime"] == "triton"
                await admin_client.delete(isvc.RESOURCE, "m", namespace)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        secret = await admin_client.get(resources.SECRET, serve.SECRET[1], namespace)
        assert {"ca.crt", "tls.crt", "tls.key"} <= set(secret["data"])
        made = sorted({(verb, res) for (verb, res, _code) in c.requests})
        assert ("create", "secrets") in made and (
            "patch",
            "customresourcedefinitions.apiextensions.k8s.io",
        ) in made
        rules = deploy_rbac.declared_rules()
        assert [m for m in made if not rbac.covers(rules, *m)] == []
        assert [m for m in c.forbidden if " cannot " in m] == []
        assert not any(code in (401, 403) for (_v, _r, code) in c.requests)
        # the webhook's rules are all used here (none is dead)
        used = {res for _, res in made}
        assert {r.name for r in serve.RBAC} <= used
    finally:
        await c.close()
        await identity.delete_objects(admin_client, cluster_scoped)
