"""``why`` on the real control plane, as a READ-ONLY user: it names the cause and the upstream
message of an InferenceService whose pod cannot be scheduled (a GPU request larger than any node)
and of one that crash-loops (a kwok stage), finds every child the operator settled in sync, shows
the children of one no operator reconciled as missing, and answers within a second.

The operator runs in this process with admin credentials, watching one namespace. ``why`` runs as a
ServiceAccount bound to exactly :func:`mlops_platform.why.read_rules` (get/list only), four ways: the
functions, the click command (CliRunner, timed), the ``kubectl-mlops`` console script as a
subprocess, and through kubectl's plugin lookup (``kubectl mlops why``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click.testing
import pytest

from mlops_platform import cli, why
from mlops_platform.controllers.inferenceservice import labels
from mlops_platform.devcluster import nodes
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import identity, isvc, plugin, stages, wait, webhook
from mlops_platform.testing import operator as operator_process

ISVC = isvc.RESOURCE  # v1alpha1 objects: every request goes through the conversion webhook
WITHIN = 1.0  # seconds: the acceptance bound of one `why` call on a warm cluster
SCRIPT = Path(sys.executable).parent / "kubectl-mlops"


def _model(name: str, **spec: Any) -> dict[str, Any]:
    return isvc.manifest(
        name, modelUri=f"s3://models/{name}/1", framework="seldon", minReplicas=1, maxReplicas=1, **spec
    )


def _flat(text: str) -> str:
    """``text`` with every run of whitespace one space (the human output wraps lines)."""
    return " ".join(text.split())


@pytest.fixture(scope="module")
async def watched(admin_client: rclient.Client) -> AsyncIterator[str]:
    """The namespace the operator watches."""
    await webhook.install_crd(admin_client)
    async with plugin.temporary_namespace(admin_client, "why") as ns:
        yield ns


@pytest.fixture(scope="module")
async def operator(kube_cluster: Path, watched: str) -> AsyncIterator[rmanager.Manager]:
    async with (
        rclient.Client.from_kubeconfig(str(kube_cluster)) as c,
        operator_process.running(c, namespace=watched) as mgr,
    ):
        yield mgr


@pytest.fixture(scope="module")
async def reader(
    kube_cluster: Path, admin_client: rclient.Client, watched: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Path]:
    """A kubeconfig of a ServiceAccount bound (cluster-wide) to why's read-only rules only."""
    name = f"why-reader-{uuid.uuid4().hex[:6]}"
    rbac: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": watched}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": why.read_rules(),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": watched}],
        },
    ]
    await identity.apply_objects(admin_client, rbac)
    try:
        token = await identity.token_for(admin_client, watched, name)
        path = tmp_path_factory.mktemp("why") / "reader.kubeconfig"
        identity.token_kubeconfig(kube_cluster, token, path, namespace=watched)
        path.chmod(0o600)
        yield path
    finally:
        await identity.delete_objects(admin_client, rbac)


async def _report(kubeconfig: Path, namespace: str, name: str) -> why.Report:
    async with rclient.Client.from_kubeconfig(kubeconfig) as c:
        return why.analyze(await why.read(c, namespace, name))


async def _invoke(*args: str) -> tuple[click.testing.Result, float]:
    """The ``mlops-platform`` command in a thread (it runs its own event loop), and its wall time."""
    runner = click.testing.CliRunner()
    started = time.perf_counter()
    result = await asyncio.to_thread(runner.invoke, cli.main, list(args))
    return result, time.perf_counter() - started


async def _run(*argv: str, kubeconfig: Path, path: str | None = None) -> tuple[int, str, str, float]:
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | {"KUBECONFIG": str(kubeconfig)}
    if path is not None:
        env["PATH"] = path
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode(), time.perf_counter() - started


async def test_the_reader_can_read_but_not_write(reader: Path, watched: str) -> None:
    async with rclient.Client.from_kubeconfig(reader) as c:
        await c.list(resources.POD, watched)
        with pytest.raises(rclient.ApiError) as denied:
            await c.create(ISVC, _model("nope"), watched)
    assert denied.value.status == 403


async def test_an_unschedulable_gpu_request_names_the_schedulers_message(
    operator: rmanager.Manager, admin_client: rclient.Client, reader: Path, watched: str
) -> None:
    too_many = nodes.GPUS_PER_NODE * 2  # more than any node has (and the API's maximum)
    await admin_client.create(ISVC, _model("gpu", gpuPerReplica=too_many), watched)
    await wait.for_condition(
        admin_client, ISVC, watched, "gpu", "Ready", "False", "Unschedulable", timeout=60
    )
    pods = (await admin_client.list(resources.POD, watched, label_selector=f"{labels.INFERENCESERVICE}=gpu"))[
        "items"
    ]
    (scheduled,) = [c for c in pods[0]["status"]["conditions"] if c["type"] == "PodScheduled"]
    upstream = scheduled["message"]  # the scheduler's own words
    assert "Insufficient nvidia.com/gpu" in upstream

    async def with_the_event() -> why.Report | None:
        r = await _report(reader, watched, "gpu")
        return r if any(e.reason == "FailedScheduling" for e in r.events) else None

    r = await wait.until(with_the_event, timeout=30, what="why shows the FailedScheduling Event")
    assert r.errors == {}, r.errors  # the read-only rules were enough
    assert r.summary == f"gpu: not serving — Unschedulable: pod {pods[0]['metadata']['name']}: {upstream}"
    assert [p.unscheduled for p in r.pods] == [("Unschedulable", upstream)]
    assert {c.action for c in r.children} == {"in-sync"}, [(c.name, c.action, c.paths) for c in r.children]
    assert {c.kind for c in r.children} >= {"Deployment", "Service"}
    failed = next(e for e in r.events if e.reason == "FailedScheduling")
    assert (failed.type, failed.object, failed.note) == (
        "Warning",
        f"Pod/{pods[0]['metadata']['name']}",
        upstream,
    )
    assert _flat(upstream) in _flat(why.render_text(r))


async def test_a_crash_loop_names_the_container_and_answers_within_a_second(
    operator: rmanager.Manager,
    admin_client: rclient.Client,
    reader: Path,
    watched: str,
) -> None:
    stage = stages.crashloop_stage(f"why-crash-{watched}"[:63], watched, labels.INFERENCESERVICE, "crash")
    stage_res = await admin_client.resource_for(stages.STAGE_API_VERSION, "Stage")
    await admin_client.create(stage_res, stage)
    try:
        await admin_client.create(ISVC, _model("crash"), watched)
        await wait.for_condition(
            admin_client, ISVC, watched, "crash", "Ready", "False", "CrashLoopBackOff", timeout=60
        )
        args = ("why", "crash", "-n", watched, "--kubeconfig", str(reader))
        warm, _ = await _invoke(*args)  # the first call pays for imports and connection setup
        assert warm.exit_code == 0, warm.output
        result, took = await _invoke(*args)
        print(f"\nwhy (click command, read-only user, warm cluster): {took * 1000:.0f} ms")
        assert result.exit_code == 0, result.output
        assert took < WITHIN, f"why took {took:.2f}s"

        text = result.output
        summary = _flat(text.split("\n\n", 1)[0])  # the summary comes first, wrapped at the width
        assert summary.startswith("crash: not serving — CrashLoopBackOff: pod crash-predictor-"), text
        flat = _flat(text)
        # the stage's container status, word for word: reason, message, restarts, last exit
        assert "container predictor: back-off restarting failed container" in flat
        assert "(last terminated: Error, exit code 1)" in flat
        assert "waiting CrashLoopBackOff: back-off restarting failed container; restarts 5" in flat
        assert "\x1b[" not in text  # not a terminal: no colour
        assert "in sync  Deployment/crash-predictor" in text
        assert "Not readable" not in text

        # no -n: the namespace of the kubeconfig's context, as kubectl picks it
        as_json, _ = await _invoke("why", "crash", "--kubeconfig", str(reader), "-o", "json")
        assert as_json.exit_code == 0, as_json.output
        out = json.loads(as_json.output)
        assert out["summary"] == summary
        assert (out["serving"], out["wouldChange"], out["errors"]) == (False, 0, {})
        ready = out["conditions"][0]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "CrashLoopBackOff")
        (p,) = out["pods"]
        (container,) = p["containers"]
        assert (container["reason"], container["restartCount"]) == ("CrashLoopBackOff", 5)
        assert container["lastTermination"]["exitCode"] == 1

        # the console script, as a subprocess (pipe: no colour), KUBECONFIG of the reader
        if not SCRIPT.exists():
            pytest.fail(f"{SCRIPT.name} is not installed: reinstall the package (pip install -e .)")
        rc, stdout, stderr, took_script = await _run(
            str(SCRIPT), "why", "crash", "-n", watched, kubeconfig=reader
        )
        print(
            f"kubectl-mlops why (a new process: interpreter start and imports included): {took_script:.2f} s"
        )
        assert rc == 0, stderr
        assert stdout.splitlines()[0].startswith(
            "crash: not serving — CrashLoopBackOff: pod crash-predictor-"
        )

        # through kubectl's plugin lookup: `kubectl mlops why NAME -n NS` finds kubectl-mlops on PATH
        kubectl_bin = _kubectl()
        path = f"{SCRIPT.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        rc, stdout, stderr, _ = await _run(
            kubectl_bin, "mlops", "why", "crash", "-n", watched, "-o", "json", kubeconfig=reader, path=path
        )
        assert rc == 0, stderr
        assert json.loads(stdout)["summary"].startswith("crash: not serving — CrashLoopBackOff")
    finally:
        await admin_client.delete(stage_res, stage["metadata"]["name"])


async def test_an_inferenceservice_no_operator_watches_has_every_child_missing(
    operator: rmanager.Manager, admin_client: rclient.Client, reader: Path, namespace: str
) -> None:
    await admin_client.create(ISVC, _model("orphan"), namespace)  # not the operator's namespace
    r = await _report(reader, namespace, "orphan")
    assert r.summary.startswith("orphan: not serving — no status yet")
    assert r.conditions == () and r.observed_generation is None
    assert [(c.kind, c.action) for c in r.children] == [
        ("Deployment", "missing"),
        ("Service", "missing"),
        ("PrometheusRule", "missing"),
        ("ServiceMonitor", "missing"),
    ]
    assert r.summary.endswith("(the operator would change 4 children)")


async def test_a_missing_inferenceservice_is_an_error_naming_it(reader: Path, watched: str) -> None:
    result, _ = await _invoke("why", "ghost", "-n", watched, "--kubeconfig", str(reader))
    assert result.exit_code == 1
    assert f'inferenceservice "ghost" not found in namespace "{watched}"' in result.output


def _kubectl() -> str:
    from mlops_platform.devcluster import binaries

    try:
        return str(binaries.find(build=False)["kubectl"])
    except FileNotFoundError:
        found = shutil.which("kubectl")
        if found is None:
            pytest.fail("no kubectl: run `make binaries` or put kubectl on PATH")
        return found
