"""``docs/install.md``, "On the local cluster", and the ways of ``docs/install-cert-manager.md``, word
for word: every command block of those sections is taken from the Markdown (``testing.docs``) and
run as written by bash from the checkout, in one shell session (each block starts with the
environment the ones before it left), on the fresh cluster the set-up starts. After each install: two
replicas Ready on the real node, one leader, the API server converting through the webhook Service,
an InferenceService reconciled; after each uninstall: nothing but the CRD left. The cert-manager
page's ways run on the same cluster, which has cert-manager's CRDs but no cert-manager: what each
creates is checked (nothing issues the certificate), and that its uninstall leaves only the CRD.
The tear-down block runs whatever happened.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mlops_platform.api import crd
from mlops_platform.deploy import defaults
from mlops_platform.devcluster import binaries, cluster
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import docs, incluster, isvc, plugin

ROOT = binaries.repo_root() or Path.cwd()
DOC = ROOT / "docs/install.md"
CERT_MANAGER_DOC = ROOT / "docs/install-cert-manager.md"
CERT_MANAGER_WAYS = ("With kustomize", "Printed", "With Helm")
ISSUER = rclient.Resource("cert-manager.io", "v1", "issuers", "Issuer")
CERTIFICATE = rclient.Resource("cert-manager.io", "v1", "certificates", "Certificate")
CLUSTER = "mlops-install"
NS = defaults.DEFAULT_NAMESPACE
SETUP, TEARDOWN = "Set up the local cluster", "Tear down"
WAYS = (
    "b) Helm on the local cluster",
    "a) kustomize on the local cluster",
    "c) mlops-platform manifests on the local cluster",
)


def _bash(lines: list[str], env: dict[str, str]) -> dict[str, str]:
    """The lines run by bash (``set -euo pipefail``) from the checkout with ``env``; the environment
    it ends with (what the next block of the same reader's shell starts from)."""
    with tempfile.NamedTemporaryFile(prefix="docs-env-") as after:
        script = "set -euo pipefail\n" + "\n".join(lines) + f"\nenv -0 > {after.name}\n"
        proc = subprocess.run(
            ["bash", "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
        if proc.returncode != 0:
            raise AssertionError(
                f"docs/install.md block failed (exit {proc.returncode}):\n{script}\n"
                f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
            )
        return dict(item.split("=", 1) for item in Path(after.name).read_text().split("\0") if "=" in item)


async def _run(heading: str, env: dict[str, str], index: int = 0, doc: Path = DOC) -> dict[str, str]:
    return await asyncio.to_thread(_bash, docs.commands(doc, heading, index=index), env)


async def _cert_manager_objects(c: rclient.Client) -> None:
    """What a cert-manager install creates (docs/install-cert-manager.md, 1 to 3)."""
    await c.get(ISSUER, defaults.ISSUER, NS)
    cert = await c.get(CERTIFICATE, defaults.CERTIFICATE, NS)
    service = f"{defaults.WEBHOOK_SERVICE}.{NS}.svc"
    assert cert["spec"]["dnsNames"] == [service, f"{service}.cluster.local"], cert["spec"]
    assert cert["spec"]["secretName"] == defaults.CERT_SECRET
    deployment = await c.get(resources.DEPLOYMENT, defaults.NAME, NS)
    pod = deployment["spec"]["template"]["spec"]
    assert f"--webhook-cert-dir={defaults.CERT_DIR}" in pod["containers"][0]["args"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[defaults.CERT_VOLUME]["secret"]["secretName"] == defaults.CERT_SECRET
    annotations = (await c.get(resources.CRD, crd.CRD_NAME))["metadata"].get("annotations") or {}
    assert annotations.get(defaults.CA_INJECTION_ANNOTATION) == f"{NS}/{defaults.CERTIFICATE}"


async def _installed(c: rclient.Client) -> None:
    await incluster.until_serving(c, incluster.IMAGE, 2, NS, timeout=120)
    async with plugin.temporary_namespace(c, "docs-install") as ns:
        await c.create(isvc.RESOURCE, isvc.manifest("docs", modelUri="gs://m/docs/1", framework="triton"), ns)
        await incluster.until_reconciled(c, ns, "docs")


@pytest.fixture
async def local_cluster() -> AsyncIterator[dict[str, str]]:
    """The section's set-up run (a cluster of its own); its tear-down after, whatever happened."""
    if plugin.use_existing():
        pytest.skip("the section starts a local cluster of its own")
    setup = docs.commands(DOC, SETUP)
    assert any(f"--name {CLUSTER}" in line for line in setup), setup  # the cluster this test reads
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    try:
        yield await _run(SETUP, env)
    finally:
        await _run(TEARDOWN, env)
        assert not cluster.exists(CLUSTER)


async def test_each_install_way_of_the_docs_works_as_written_on_the_local_cluster(
    local_cluster: dict[str, str],
) -> None:
    env = local_cluster
    async with rclient.Client.from_kubeconfig(cluster.kubeconfig_path(CLUSTER)) as c:
        for way in WAYS:
            env = await _run(way, env, index=0)
            await _installed(c)
            env = await _run(way, env, index=1)
            await incluster.until_uninstalled(c, NS)
        for way in CERT_MANAGER_WAYS:
            env = await _run(way, env, index=0, doc=CERT_MANAGER_DOC)
            await _cert_manager_objects(c)
            env = await _run(way, env, index=1, doc=CERT_MANAGER_DOC)
            await incluster.until_uninstalled(c, NS)
