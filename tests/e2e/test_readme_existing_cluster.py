"""README.md's "Using an existing cluster instead", followed as written: its ``sh`` block's commands
(taken out of the README by ``testing.docs``) run in a shell from the checkout, with a HOME whose
``~/.kube/config`` is the test cluster's kubeconfig and the pinned kubectl on PATH; the long-running
``mlops-platform run`` last, in the background, stopped with SIGTERM at the end.

Then one InferenceService is created in each version (v1alpha1, v1beta1, v1) and read back in the
other two (the API server converts through the README's operator's webhook), each gets its status
from that operator, and the README's commands run again over the converting CRD keep its caBundle
and conversions working. Two starting points: the CRD as the session left it (a URL), and the CRD
as the issue's reporter had it, ``kubectl apply --server-side -f config/crd/bases`` (the in-cluster
Service, owned by kubectl).

The session's webhook is paused meanwhile and the CRD restored to it after (``webhook.paused``);
the ports the README's ``run`` binds (its flags and defaults, read with its own parser) are held
host-wide (``testing.hostports``), as every test binding fixed ports must.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mlops_platform.api import CRD_NAME, crd
from mlops_platform.cli import install_crd, operator, options
from mlops_platform.deploy import crdinstall
from mlops_platform.devcluster import binaries
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import docs, hostports, plugin, wait, webhook
from mlops_platform.webhooks import serve

SECTION = "Using an existing cluster instead"
TIMEOUT = 90
JSON = dict[str, Any]
VERSIONS = ("v1alpha1", "v1beta1", "v1")


def _root() -> Path:
    root = binaries.repo_root()
    if root is None:
        pytest.fail("the README test runs from a source checkout")
    return root


@dataclasses.dataclass(frozen=True)
class Readme:
    """The section's commands: those before ``mlops-platform run``, and that one (the last)."""

    setup: list[str]
    run: str
    webhook_url: str
    ports: list[int]  # every port the run command binds


def _params(line: str, command: Any, name: str) -> dict[str, Any]:
    """The parameters of ``line`` (``... mlops-platform NAME ARGS``) as the command parses them."""
    words = shlex.split(line)
    args = words[words.index(name) + 1 :]
    with command.make_context(name, args) as ctx:
        return dict(ctx.params)


def readme() -> Readme:
    lines = docs.commands(_root() / "README.md", SECTION)
    runs = [i for i, line in enumerate(lines) if "mlops-platform run" in line]
    assert runs == [len(lines) - 1], (
        f"README {SECTION!r}: one `mlops-platform run` command, the last: {lines}"
    )
    installs = [line for line in lines if "mlops-platform install-crd" in line]
    assert len(installs) == 1, f"README {SECTION!r}: one `mlops-platform install-crd` command: {lines}"
    url = _params(installs[0], install_crd.install_crd, "install-crd")["webhook_url"]
    assert url, f"README {SECTION!r}: install-crd without --webhook-url: {installs[0]}"
    flags = _params(lines[-1], operator.run, "run")
    binds = [flags[f"{name}_bind_address"] for name in ("health_probe", "metrics", "webhook")]
    ports = [a[1] for b in binds if b not in ("0", "off") and (a := options.parse_address(b)) and a[1]]
    return Readme(setup=lines[:-1], run=lines[-1], webhook_url=url, ports=ports)


def readme_env(home: Path, kube_cluster: Path) -> dict[str, str]:
    """The environment the README's commands run in: ``~/.kube/config`` is the test cluster's."""
    (home / ".kube").mkdir(parents=True)
    shutil.copy(kube_cluster, home / ".kube" / "config")
    kubectl = binaries.find(build=False, names=("kubectl",))["kubectl"]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return {**env, "HOME": str(home), "PATH": f"{kubectl.parent}{os.pathsep}{env.get('PATH', '')}"}


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else "(no log)"


def _start(script: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            ["sh", "-c", script],
            cwd=_root(),
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@contextlib.asynccontextmanager
async def readme_running(
    doc: Readme, env: dict[str, str], log: Path
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """The README's commands in one shell, ``run`` last (exec'd: the shell becomes the operator);
    SIGTERM on exit, which it must answer by exiting 0."""
    proc = _start("\n".join(["set -e", *doc.setup, f"exec {doc.run}"]), env, log)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.to_thread(proc.wait)
            raise AssertionError(
                f"the README's operator did not stop on SIGTERM within 30s: {_tail(log)}"
            ) from None
    assert proc.returncode == 0, f"the README's operator exited {proc.returncode} on SIGTERM: {_tail(log)}"


def _alive(proc: subprocess.Popen[bytes], log: Path) -> None:
    if proc.poll() is not None:
        raise AssertionError(f"the README's commands exited {proc.returncode}: {_tail(log)}")


async def until_serving(c: rclient.Client, doc: Readme, proc: subprocess.Popen[bytes], log: Path) -> None:
    """install-crd pointed the CRD at the README's URL, its operator injected the bundle of its own
    Secret, and the API server converts through it."""

    async def pointed() -> bool:
        _alive(proc, log)
        live = await c.get(resources.CRD, CRD_NAME)
        return crdinstall.client_config(live).get("url") == doc.webhook_url

    async def injected() -> bool:
        _alive(proc, log)
        stored = await webhook.stored_bundle(c, serve.SECRET)
        return bool(stored) and await webhook.ca_bundle(c) == stored

    async def converting() -> bool:
        _alive(proc, log)
        return await crd.converts(c)

    await wait.until(pointed, timeout=TIMEOUT, retry_on=(), what=f"the CRD's webhook at {doc.webhook_url}")
    await wait.until(
        injected, timeout=TIMEOUT, retry_on=(), what="the README operator's CA bundle in the CRD"
    )
    await wait.until(converting, timeout=TIMEOUT, retry_on=(), what="the API server converting through it")


def resource(version: str) -> rclient.Resource:
    return rclient.Resource(crd.RESOURCE.group, version, crd.RESOURCE.plural, crd.RESOURCE.kind)


def manifest(version: str) -> JSON:
    """A one-replica Triton InferenceService written in ``version`` (kwok nodes run its pod)."""
    name, uri = f"readme-{version}", f"s3://models/readme-{version}/1"
    if version == "v1alpha1":
        spec: JSON = {"modelUri": uri, "framework": "triton", "minReplicas": 1, "maxReplicas": 1}
    else:
        spec = {
            "predictor": {
                "model": {"uri": uri},
                "runtime": "triton",
                "autoscaling": {"minReplicas": 1, "maxReplicas": 1},
            }
        }
    return {
        "apiVersion": f"mlops.platform/{version}",
        "kind": crd.RESOURCE.kind,
        "metadata": {"name": name},
        "spec": spec,
    }


def said(obj: JSON) -> tuple[str, str, int, int]:
    """(model URI, runtime, min replicas, max replicas) of an object in any version."""
    spec = obj["spec"]
    if obj["apiVersion"].endswith("/v1alpha1"):
        return spec["modelUri"], spec["framework"], spec["minReplicas"], spec["maxReplicas"]
    p = spec["predictor"]
    return p["model"]["uri"], p["runtime"], p["autoscaling"]["minReplicas"], p["autoscaling"]["maxReplicas"]


async def read_in_every_version(c: rclient.Client, namespace: str) -> None:
    for written in VERSIONS:
        want = said(manifest(written))
        for version in VERSIONS:
            got = await c.get(resource(version), f"readme-{written}", namespace)
            assert got["apiVersion"] == f"mlops.platform/{version}", (written, got)
            assert said(got) == want, (written, version, got["spec"])


async def rerun_setup(doc: Readme, env: dict[str, str]) -> str:
    """The README's commands before ``run``, again; their output (they must succeed)."""
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", "\n".join(["set -e", *doc.setup]), cwd=_root(), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, out.decode()
    return out.decode()


@pytest.mark.parametrize("start", ["session CRD (a URL)", "kubectl apply -f config/crd/bases (the Service)"])
async def test_the_readme_commands_run_the_operator_against_the_cluster(
    start: str,
    kube_cluster: Path,
    admin_client: rclient.Client,
    namespace: str,
    kubectl: plugin.Kubectl,
    tmp_path: Path,
) -> None:
    c, doc = admin_client, readme()
    env, log = readme_env(tmp_path / "home", kube_cluster), tmp_path / "readme.log"
    async with hostports.holding(doc.ports), webhook.paused(c):
        if start.startswith("kubectl"):  # as the reporter had it
            await crdinstall.repoint(c, None)
            rc, _, err = await kubectl("apply", "--server-side", "-f", str(_root() / crd.CRD_FILE))
            assert rc == 0, err
        async with readme_running(doc, env, log) as proc:
            await until_serving(c, doc, proc, log)
            for version in VERSIONS:
                await c.create(resource(version), manifest(version), namespace)
            await read_in_every_version(c, namespace)
            for version in VERSIONS:  # a status from the README's operator, read in every version
                await wait.for_condition(c, resource("v1"), namespace, f"readme-{version}", "Ready", "True")
                for read in VERSIONS:
                    got = await c.get(resource(read), f"readme-{version}", namespace)
                    assert {"Ready"} <= {cond["type"] for cond in got["status"]["conditions"]}, got
            # the README's commands again, over the CRD the operator injected: nothing breaks
            bundle = await webhook.ca_bundle(c)
            out = await rerun_setup(doc, env)
            assert "caBundle: kept" in out, out
            assert await webhook.ca_bundle(c) == bundle
            await wait.until(lambda: crd.converts(c), timeout=30, what="conversions after install-crd again")
            await read_in_every_version(c, namespace)
            _alive(proc, log)
