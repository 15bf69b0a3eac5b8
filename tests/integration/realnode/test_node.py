"""The local cluster's real worker node runs pods for real: processes, logs, exec, port-forward,
Services, crashes, memory limits, images that are not there, and real resource metrics."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mlops_platform.devcluster import binaries, cluster
from mlops_platform.devcluster.realnode import fabric, images
from mlops_platform.devcluster.realnode import node as realnode
from mlops_platform.runtime import objects, quantity
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import realnode as rn
from mlops_platform.testing import wait

Kubectl = Any


async def _ready_server(
    c: rclient.Client, ns: str, name: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    await c.create(resources.POD, rn.server(name, labels), ns)
    return await rn.wait_pod(c, ns, name, rn.is_ready, what="Ready (its readiness probe passes)")


async def test_the_real_node_is_ready_tainted_and_reached_by_its_ip(admin_client: rclient.Client) -> None:
    listing = await admin_client.list(resources.NODE, label_selector=realnode.SELECTOR)
    real = listing["items"]
    assert [objects.name(n) for n in real] == ["real-node-0"]
    node = real[0]
    assert objects.condition_is(node, "Ready")
    assert {"key": "mlops.platform/real-node", "value": "true", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert re.fullmatch(r"10\.2\d\d\.0\.10", addresses["InternalIP"]), addresses
    info = node["status"]["nodeInfo"]
    assert info["kubeletVersion"].startswith("v1.36") and info["containerRuntimeVersion"].startswith(
        "containerd://2."
    )
    # kwok does not manage it: its own kubelet heartbeats and reports its real capacity
    assert "kwok.x-k8s.io/node" not in (node["metadata"].get("annotations") or {})


async def test_a_pod_really_runs_with_logs_exec_and_port_forward(
    admin_client: rclient.Client, namespace: str, kubectl: Kubectl, kube_cluster: Path
) -> None:
    pod = await _ready_server(admin_client, namespace, "web")
    assert pod["spec"]["nodeName"] == "real-node-0"
    assert pod["status"]["podIP"].startswith(pod["status"]["hostIP"].rsplit(".", 2)[0])
    rc, out, err = await kubectl("logs", "-n", namespace, "web")
    assert rc == 0 and "serving on 8080" in out, err
    rc, out, err = await kubectl(
        "exec",
        "-n",
        namespace,
        "web",
        "--",
        "python3",
        "-c",
        "import os; print(open('/proc/1/cmdline').read().split(chr(0))[0], os.uname().nodename)",
    )
    # PID 1 of the pod's own PID namespace is the server's python3: a real process, in its own UTS
    assert rc == 0 and out.split() == ["python3", "web"], (out, err)
    async with (
        _port_forward(kube_cluster, namespace, "pod/web", 8080) as port,
        aiohttp.ClientSession() as s,
        s.get(f"http://127.0.0.1:{port}/hello") as r,
    ):
        assert (r.status, await r.text()) == (200, "web /hello")


@contextlib.asynccontextmanager
async def _port_forward(kubeconfig: Path, namespace: str, target: str, port: int) -> AsyncIterator[int]:
    """``kubectl port-forward`` to a free local port on 127.0.0.1 (through the API server and the
    kubelet); yields the local port once it forwards."""
    proc = await asyncio.create_subprocess_exec(
        str(binaries.find(build=False, names=("kubectl",))["kubectl"]),
        "--kubeconfig",
        str(kubeconfig),
        "port-forward",
        "-n",
        namespace,
        "--address",
        "127.0.0.1",
        target,
        f":{port}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        found = re.search(r"127\.0\.0\.1:(\d+) ->", line)
        assert found, line
        yield int(found.group(1))
    finally:
        proc.terminate()
        await proc.wait()


async def test_a_service_s_cluster_ip_and_dns_name_answer_from_another_pod(
    admin_client: rclient.Client, namespace: str, kubectl: Kubectl
) -> None:
    await _ready_server(admin_client, namespace, "backend", {"app": "backend"})
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "backend"},
        "spec": {"selector": {"app": "backend"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    live = await admin_client.create(resources.SERVICE, svc, namespace)
    await _ready_server(admin_client, namespace, "client")
    # kube-proxy's rules (in the node's namespace), then the cluster DNS (CoreDNS) for the name
    # status.url carries and, through the pod's search path, the short one: each programmed from a
    # watch, so each answers within seconds of the Service (kube-proxy rejects until it has endpoints)
    for host, path in (
        (live["spec"]["clusterIP"], "/via-service"),
        (f"backend.{namespace}.svc.cluster.local", "/via-dns"),
        ("backend", "/via-dns"),
    ):
        answers: list[tuple[int, str]] = []

        async def answered(
            url: str = f"http://{host}{path}", answers: list[tuple[int, str]] = answers
        ) -> bool:
            answers.append(await rn.exec_fetch(kubectl, namespace, "client", url))
            return answers[-1][0] == 0

        await wait.until(answered, timeout=60, interval=0.5, what=f"{host} answering from pod client")
        assert answers[-1] == (0, f"backend {path}"), (host, answers)


async def test_a_crashing_container_really_goes_into_crash_loop_back_off(
    admin_client: rclient.Client, namespace: str
) -> None:
    await admin_client.create(
        resources.POD, rn.pod("crash", ["python3", "-c", "import sys; print('bye'); sys.exit(3)"]), namespace
    )

    def backing_off(p: dict[str, Any]) -> bool:
        st = rn.container_status(p)
        return (st.get("state") or {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"

    # the kubelet reports CrashLoopBackOff while it waits out each back-off (10 s, 20 s, 40 s...): a
    # loaded machine can delay the status a window shows, so look often and through several windows
    pod = await rn.wait_pod(
        admin_client, namespace, "crash", backing_off, what="CrashLoopBackOff", timeout=240, interval=0.2
    )
    last = rn.container_status(pod)["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (3, "Error")


async def test_a_too_small_memory_limit_really_gets_oom_killed(
    admin_client: rclient.Client, namespace: str
) -> None:
    hog = "b = bytearray(256 * 2**20); print('allocated', flush=True); import time; time.sleep(60)"
    await admin_client.create(
        resources.POD, rn.pod("hog", ["python3", "-c", hog], limits={"memory": "48Mi"}), namespace
    )

    def oom_killed(p: dict[str, Any]) -> bool:
        st = rn.container_status(p)
        done = (
            (st.get("lastState") or {}).get("terminated") or (st.get("state") or {}).get("terminated") or {}
        )
        return done.get("reason") == "OOMKilled"

    await rn.wait_pod(admin_client, namespace, "hog", oom_killed, what="OOMKilled")


@pytest.mark.parametrize(
    ("policy", "reason"), [("Never", "ErrImageNeverPull"), ("IfNotPresent", "ImagePullBackOff")]
)
async def test_an_image_that_is_not_on_the_node_is_never_pulled_from_anywhere(
    admin_client: rclient.Client, namespace: str, policy: str, reason: str
) -> None:
    """No registry is reachable from the node (its fabric has no route out): a missing image gets the
    kubelet's own reason. A pull asks the node's own resolver (its loopback, which refuses), never
    the machine's."""
    manifest = rn.pod("absent", ["true"], image="mlops.local/absent:1", pull_policy=policy)
    await admin_client.create(resources.POD, manifest, namespace)
    reasons: set[str] = set()

    def waiting(p: dict[str, Any]) -> bool:
        r = (rn.container_status(p).get("state") or {}).get("waiting", {}).get("reason")
        if r:
            reasons.add(r)
        return r == reason

    await rn.wait_pod(admin_client, namespace, "absent", waiting, what=reason)
    assert reasons <= {reason, "ErrImagePull", "ContainerCreating"}, reasons
    if policy != "Never":  # the kubelet's event of the failed pull (sent after the status, batched)

        async def lookups() -> list[str]:
            events = (await admin_client.list(resources.EVENT, namespace))["items"]
            messages = [e.get("note", "") for e in events if e.get("reason") == "Failed"]
            return [m for m in messages if "lookup mlops.local" in m]

        failed = await wait.until(lookups, timeout=30, what="the failed pull's event")
        assert all("on 127.0.0.1:53" in m for m in failed), failed


async def test_metrics_server_reports_the_real_cpu_of_a_pod(
    admin_client: rclient.Client, namespace: str
) -> None:
    burn = "while True: pass"
    await admin_client.create(
        resources.POD,
        rn.pod("burn", ["python3", "-c", burn], limits={"cpu": "300m", "memory": "64Mi"}),
        namespace,
    )
    await rn.wait_pod(
        admin_client,
        namespace,
        "burn",
        lambda p: (p.get("status") or {}).get("phase") == "Running",
        what="Running",
    )
    path = f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods/burn"
    seen: list[str] = []

    async def busy() -> bool:
        try:
            m = await admin_client.request("GET", path, resource="pods.metrics.k8s.io")
        except rclient.ApiError as e:
            if e.not_found:  # no sample yet
                return False
            raise
        cpu = m["containers"][0]["usage"]["cpu"]
        seen.append(cpu)
        return quantity.parse(cpu) >= Decimal("0.15")  # a busy loop under a 300m limit

    try:
        await wait.until(busy, timeout=120, interval=2, what="the metrics API's CPU of pod burn >= 150m")
    except TimeoutError as e:
        raise TimeoutError(f"{e}; the samples it served: {seen}") from None


async def _python_once(
    c: rclient.Client,
    kubectl: Kubectl,
    namespace: str,
    image: str,
    name: str,
    check: str,
    memory: str,
    pod_spec: dict[str, Any] | None = None,
) -> str:
    """``python -c check`` in a pod ``name`` of ``image`` on the node, run once (``memory`` its limit,
    ``pod_spec`` added to its spec); it must succeed: its log."""
    manifest = rn.pod(
        name, ["python", "-c", check], image=image, restart_policy="Never", limits={"memory": memory}
    )
    manifest["spec"].update(pod_spec or {})
    phase, out = await rn.run_once(c, kubectl, namespace, manifest)
    assert phase == "Succeeded", out
    return out


async def test_the_model_server_image_is_built_here_and_runs_on_the_node(
    admin_client: rclient.Client, namespace: str, local_cluster_name: str, kubectl: Kubectl
) -> None:
    """MLServer 1.7.1 with its scikit-learn and XGBoost runtimes, from Debian's and PyPI's packages at
    upstream's pins, imported on demand (``dev import-image mlserver``)."""
    refs = await asyncio.to_thread(cluster.import_images, local_cluster_name, ["mlserver"])
    assert refs == [images.MLSERVER.ref] == ["mlops.local/mlserver:1.7.1"]
    check = (
        "import mlserver, mlserver_sklearn, mlserver_xgboost, sklearn, xgboost;"
        " print(mlserver.__version__, sklearn.__version__, xgboost.__version__)"
    )
    # 512Mi: numpy, scipy, scikit-learn and xgboost loaded at once
    out = await _python_once(
        admin_client, kubectl, namespace, images.MLSERVER.ref, "mlserver", check, "512Mi"
    )
    assert out.split() == ["1.7.1", "1.5.2", "2.1.2"]  # upstream's image's versions


async def test_the_operator_image_is_built_here_and_runs_as_non_root_without_pip(
    admin_client: rclient.Client, namespace: str, local_cluster_name: str, kubectl: Kubectl
) -> None:
    """The operator and storage initializer image, the Dockerfile's recipe made here: this checkout's
    wheel and its pinned dependencies in a venv, non-root, no pip (``dev import-image mlops-platform``)."""
    refs = await asyncio.to_thread(cluster.import_images, local_cluster_name, ["mlops-platform"])
    assert refs == [images.OPERATOR.ref]
    check = (
        "import os, importlib.util, mlops_platform.cli, mlops_platform.storage;"
        " print(os.getuid(), importlib.util.find_spec('pip') is None)"
    )
    non_root = {"securityContext": {"runAsNonRoot": True}}  # the kubelet checks the image's user
    ref = images.OPERATOR.ref
    out = await _python_once(admin_client, kubectl, namespace, ref, "operator", check, "256Mi", non_root)
    assert out.split() == ["65532", "True"]


@pytest.mark.parametrize("daemon", ["kube-router", "kubelet"])
async def test_dev_up_starts_again_a_node_daemon_that_died(
    admin_client: rclient.Client, local_cluster_name: str, daemon: str
) -> None:
    """Nothing restarts a node's daemon by itself (as kwokctl restarts no component); ``dev up`` on the
    running cluster finds it gone and starts it again, and the node is whole (Ready, its policy
    agent healthy) when it returns."""
    block = fabric.block_of(cluster.workdir(), local_cluster_name)
    assert block is not None
    node = fabric.Fabric(local_cluster_name, cluster.cluster_dir(local_cluster_name), block).node(0)
    before = node.pid(daemon)
    assert before is not None
    os.kill(before, signal.SIGKILL)
    await wait.until(lambda: node.pid(daemon) is None, timeout=10, what=f"{daemon} gone")
    await asyncio.to_thread(cluster.up, local_cluster_name)
    after = node.pid(daemon)
    assert after is not None and after != before
    live = await admin_client.get(resources.NODE, node.name)
    assert objects.condition_is(live, "Ready")
    assert node.pid(realnode.POLICY_AGENT) is not None
