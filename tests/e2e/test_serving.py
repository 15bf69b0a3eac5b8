"""Real model serving on the local cluster's real node (issue #38): MLServer from the local image,
the models from the in-cluster model store (MinIO, :mod:`mlops_platform.devcluster.modelstore`),
every request a real one through the API server (:mod:`mlops_platform.infer`, what
``mlops-platform infer`` sends).

The operator runs in this process with the local cluster's settings (the runtime override that puts
MLServer's local image on the real node, the operator's image as storage initializer).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from mlops_platform import api, infer, why
from mlops_platform.controllers.inferenceservice.children import monitoring
from mlops_platform.devcluster import cluster, demo
from mlops_platform.devcluster.realnode import fabric
from mlops_platform.devcluster.realnode import node as realnode
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import objectstores, probes, serving, wait
from mlops_platform.testing import realnode as rn
from mlops_platform.testing.plugin import Kubectl, temporary_namespace

iris, v2, answer, ready, QUICKSTART = (
    serving.iris,
    serving.v2,
    serving.answer,
    serving.ready,
    serving.QUICKSTART,
)
READY_TIMEOUT = serving.READY_TIMEOUT


async def create(c: rclient.Client, ns: str, obj: Any) -> None:
    await c.create(api.RESOURCE, obj, ns)


async def test_a_prediction_equals_the_models_own_for_the_same_input(
    admin_client: rclient.Client, ns: str, kubectl: Kubectl
) -> None:
    await create(admin_client, ns, iris("iris"))
    await ready(admin_client, ns, "iris")
    assert answer(await infer.infer(admin_client, "iris", ns, v2(QUICKSTART))) == [1, 1]
    rng = random.Random(38)
    rows = [[round(rng.uniform(4, 8), 1), round(rng.uniform(2, 4.5), 1), round(rng.uniform(1, 7), 1),
             round(rng.uniform(0.1, 2.5), 1)] for _ in range(20)]  # fmt: skip
    served = answer(await infer.infer(admin_client, "iris", ns, v2(rows)))
    # the model's own prediction: the same file, loaded by scikit-learn itself, next to the server
    local = (
        "import joblib, json, sys; m = joblib.load('/mnt/models/model.joblib'); "
        "print(json.dumps(m.predict(json.loads(sys.argv[1])).tolist()))"
    )
    rc, out, err = await kubectl(
        "exec",
        "-n",
        ns,
        "deploy/iris-predictor",
        "-c",
        "predictor",
        "--",
        "python",
        "-c",
        local,
        json.dumps(rows),
    )
    assert rc == 0, err
    assert served == json.loads(out)
    assert len(set(served)) > 1, f"the inputs should reach more than one class: {served}"


async def test_a_model_update_rolls_out_under_load_with_zero_failed_requests(
    admin_client: rclient.Client, ns: str
) -> None:
    await create(admin_client, ns, iris("iris"))
    await ready(admin_client, ns, "iris")
    async with serving.load(admin_client, ns, "iris") as traffic:
        await wait.until(lambda: len(traffic.answers) >= 20, timeout=60, what="20 answers of version 1")
        patch = {"spec": {"predictor": {"model": {"uri": "s3://models/iris/2"}}}}
        await admin_client.patch(api.RESOURCE, "iris", patch, namespace=ns)
        await wait.until(
            lambda: len(traffic.answers) >= 20 and all(a == [2, 2] for a in traffic.answers[-20:]),
            timeout=READY_TIMEOUT,
            what="20 answers in a row from version 2",
        )
        await serving.until_rolled_out(admin_client, ns, "iris", "s3://models/iris/2")
        after = await traffic.then(20)
    assert traffic.errors == [], traffic.summary()
    assert traffic.answers[0] == [1, 1]
    assert all(a == [2, 2] for a in after), "version 1 answered after its pods were gone"


@pytest.mark.parametrize(
    ("case", "reason", "message", "why_says"),
    [
        (
            "missing-model",
            "ModelDownloadFailed",
            "no object at s3://models/iris/404",
            "no object at s3://models/iris/404",
        ),
        ("wrong-credentials", "ModelDownloadFailed", "403 Forbidden (InvalidAccessKeyId", "403 Forbidden"),
        ("memory-limit", "CrashLoopBackOff", "(last exit: OOMKilled, code 137)", "OOMKilled, exit code 137"),
        (
            "not-a-model",
            "CrashLoopBackOff",
            "code 0): it stopped by itself",
            "exit code 0: its log:",
        ),
    ],
    ids=["missing-model", "wrong-credentials", "memory-limit", "not-a-model"],
)
async def test_a_failure_of_the_real_kubelet_or_initializer_is_in_status_and_why(
    admin_client: rclient.Client,
    ns: str,
    kube_cluster: Path,
    case: str,
    reason: str,
    message: str,
    why_says: str,
) -> None:
    if case == "missing-model":
        obj = iris(case, "s3://models/iris/404")
    elif case == "wrong-credentials":
        secret = objectstores.s3_secret("wrong", "nobody", "not-the-secret")
        await admin_client.create(resources.SECRET, secret, ns)
        obj = iris(case, secret="wrong")
    elif case == "memory-limit":
        obj = iris(case, memory="100Mi")  # MLServer with scikit-learn needs more
    else:
        obj = iris(case, "s3://models/broken/1")  # MLServer stops (exit 0) when it cannot load it
    await create(admin_client, ns, obj)

    async def failed() -> dict[str, Any] | None:
        cond = probes.condition(await admin_client.get(api.RESOURCE, case, ns), "Ready")
        return cond if cond.get("reason") == reason and message in cond.get("message", "") else None

    try:
        await wait.until(failed, timeout=READY_TIMEOUT, what=f"Ready=False/{reason}")
    except TimeoutError:
        live = await admin_client.get(api.RESOURCE, case, ns)
        raise AssertionError(f"{case}: {probes.condition(live, 'Ready')}") from None
    report = await why.collect(str(kube_cluster), None, ns, case, demo.local_settings())
    text = why.render_text(report, width=200, color=False)
    assert reason in text and why_says in text, text


async def test_every_metric_the_alerts_use_is_exported_by_the_real_server(
    admin_client: rclient.Client, ns: str
) -> None:
    """The PrometheusRule the operator wrote for an MLServer service asks for metrics the real server
    exports (its ``/metrics`` after a request), and the latency alert's path matcher matches the
    REST histogram's real path label."""
    await create(admin_client, ns, iris("iris"))
    await ready(admin_client, ns, "iris")
    await infer.infer(admin_client, "iris", ns, v2(QUICKSTART))
    rule = await admin_client.get(monitoring.PROMETHEUS_RULE.resource(), "iris", ns)
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    used = {m for e in exprs for m in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", e)}
    server_metrics = {
        m for m in used if not m.startswith("kube_")
    }  # kube-state-metrics' are not the server's
    assert server_metrics, exprs
    pods = await admin_client.list(resources.POD, ns, label_selector="mlops.platform/inferenceservice=iris")
    pod = pods["items"][0]["metadata"]["name"]
    port = serving_runtime_metrics_port()
    scrape = await admin_client.request_text(
        f"/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/metrics", resource="pods/proxy"
    )
    exported = {line.split("{")[0].split(" ")[0] for line in scrape.splitlines() if line and line[0] != "#"}
    missing = sorted(server_metrics - exported)
    assert missing == [], f"the alerts use metrics MLServer does not export: {missing}"
    paths = set(re.findall(r'rest_server_request_duration_seconds_bucket\{[^}]*path="([^"]+)"', scrape))
    matcher = re.search(r'path=~"([^"]+)"', " ".join(exprs))
    assert matcher is not None, exprs
    assert any(re.fullmatch(matcher.group(1), p) for p in paths), (matcher.group(1), paths)


def serving_runtime_metrics_port() -> int:
    return demo.local_settings().servers["seldon"].ports["metrics"]


async def test_the_network_policy_lets_its_namespace_predict_and_monitoring_scrape_and_no_one_else(
    admin_client: rclient.Client, ns: str, kubectl: Kubectl
) -> None:
    obj = iris("iris")
    obj["spec"]["networkPolicy"] = {"enabled": True}
    await create(admin_client, ns, obj)
    await ready(admin_client, ns, "iris")
    monitoring_ns = demo.local_settings().monitoring_namespace
    with contextlib.suppress(rclient.ApiError):  # shared by the tests, kept
        meta = {"name": monitoring_ns}
        await admin_client.create(
            resources.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
        )
    scraper = f"scraper-{ns}"[:63]
    async with temporary_namespace(admin_client, "np-elsewhere") as elsewhere:
        clients = [(ns, "client"), (elsewhere, "client"), (monitoring_ns, scraper)]
        try:
            for where, pod in clients:
                await admin_client.create(resources.POD, rn.server(pod), where)
            for where, pod in clients:
                await rn.wait_pod(admin_client, where, pod, rn.is_ready, what="Ready")
            infer_url = f"http://iris-predictor.{ns}.svc:8080/v2/models/iris/infer"
            metrics_url = f"http://iris-predictor.{ns}.svc:{serving_runtime_metrics_port()}/metrics"
            body = json.dumps(v2(QUICKSTART))
            said = await rn.eventually_reaches(
                kubectl,
                ns,
                "client",
                infer_url,
                True,
                "its namespace predicts",
                body=body,
                expect='"predict"',
            )
            assert answer(json.loads(said)) == [1, 1]
            said = await rn.eventually_reaches(
                kubectl, elsewhere, "client", infer_url, False, "another namespace is refused", body=body
            )
            # kube-router rejects what no policy allows (an ICMP error: "refused" at once, where a
            # dropping implementation makes the client time out); the port is open to the allowed one
            assert "Connection refused" in said or "timed out" in said, said
            await rn.eventually_reaches(
                kubectl, monitoring_ns, scraper, metrics_url, True, "monitoring scrapes", expect="model_infer"
            )
            await rn.eventually_reaches(
                kubectl, elsewhere, "client", metrics_url, False, "another namespace cannot scrape"
            )
            await rn.eventually_reaches(
                kubectl, monitoring_ns, scraper, infer_url, False, "monitoring cannot predict", body=body
            )
        finally:
            await admin_client.delete(resources.POD, scraper, monitoring_ns)


async def _iris_on_the_real_node(
    c: rclient.Client, ns: str, cluster_name: str
) -> tuple[dict[str, Any], realnode.RealNode]:
    """``iris`` serving: its pods, and the daemons of the real node they run on."""
    await create(c, ns, iris("iris"))
    await ready(c, ns, "iris")
    pods = await c.list(resources.POD, ns, label_selector="mlops.platform/inferenceservice=iris")
    block = fabric.block_of(cluster.workdir(), cluster_name)
    assert block is not None
    return pods, fabric.Fabric(cluster_name, cluster.cluster_dir(cluster_name), block).node(0)


async def test_running_model_servers_keep_answering_while_containerd_then_kubelet_restart(
    admin_client: rclient.Client, ns: str, local_cluster_name: str
) -> None:
    """The real node's containerd, then its kubelet, stopped (SIGTERM) and started again (``dev up``)
    under continuous load: the containers run on (their shims are not containerd's children), no
    request fails, and the InferenceService is Ready again with the same pod once the node is back."""
    before, node = await _iris_on_the_real_node(admin_client, ns, local_cluster_name)
    async with serving.load(admin_client, ns, "iris") as traffic:
        await traffic.more(10)
        for daemon in ("containerd", "kubelet"):
            pid = node.pid(daemon)
            assert pid is not None
            os.kill(pid, signal.SIGTERM)
            await wait.until(lambda: node.pid(daemon) is None, timeout=30, what=f"{daemon} stopped")  # noqa: B023
            await traffic.more(10)  # served with the daemon gone
            await asyncio.to_thread(cluster.up, local_cluster_name)
            assert node.pid(daemon) not in (None, pid)
            await traffic.more(10)
    assert traffic.errors == [], traffic.summary()
    live = await ready(admin_client, ns, "iris")
    after = await admin_client.list(resources.POD, ns, label_selector="mlops.platform/inferenceservice=iris")
    assert [p["metadata"]["uid"] for p in after["items"]] == [p["metadata"]["uid"] for p in before["items"]]
    statuses = after["items"][0]["status"]["containerStatuses"]
    assert [cs["restartCount"] for cs in statuses] == [0], statuses
    assert probes.condition(live, "Ready").get("reason") == "Serving"


async def test_status_says_the_node_stopped_reporting_while_it_is_notready_and_serving_once_back(
    admin_client: rclient.Client, ns: str, local_cluster_name: str
) -> None:
    """The real node's kubelet stopped for longer than the node controller's grace period (40 s):
    the node goes NotReady, the node controller takes the pod out of its Service (requests get the
    API server's "no endpoints"), and the status says so (``Ready=False``/``NodeNotReady``, not
    "serving"); with the kubelet back, the same pod (not restarted) serves and ``Ready=True``."""
    before, daemons = await _iris_on_the_real_node(admin_client, ns, local_cluster_name)
    node_name = before["items"][0]["spec"]["nodeName"]

    async def node(status: str) -> bool:
        live = await admin_client.get(resources.NODE, node_name)
        return probes.condition(live, "Ready").get("status") == status

    async def isvc_ready() -> dict[str, Any]:
        return probes.condition(await admin_client.get(api.RESOURCE, "iris", ns), "Ready")

    async def node_not_ready_said() -> bool:
        return (await isvc_ready()).get("reason") == "NodeNotReady"

    pid = daemons.pid("kubelet")
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    try:
        await wait.until(lambda: daemons.pid("kubelet") is None, timeout=30, what="kubelet stopped")
        await wait.until(lambda: node("Unknown"), timeout=120, what=f"{node_name} NotReady (grace period)")
        await wait.until(node_not_ready_said, timeout=60, what="Ready=False/NodeNotReady")
        cond = await isvc_ready()
        assert cond["status"] == "False" and f"node {node_name} stopped reporting" in cond["message"], cond
        with pytest.raises(infer.InferError, match="no endpoints available"):  # what the status says
            await infer.infer(admin_client, "iris", ns, v2(QUICKSTART))
    finally:
        await asyncio.to_thread(cluster.up, local_cluster_name)
    await wait.until(lambda: node("True"), timeout=120, what=f"{node_name} Ready again")
    live = await ready(admin_client, ns, "iris")
    assert probes.condition(live, "Ready").get("reason") == "Serving"
    assert answer(await infer.infer(admin_client, "iris", ns, v2(QUICKSTART))) == [1, 1]
    after = await admin_client.list(resources.POD, ns, label_selector="mlops.platform/inferenceservice=iris")
    assert [p["metadata"]["uid"] for p in after["items"]] == [p["metadata"]["uid"] for p in before["items"]]
    assert [cs["restartCount"] for cs in after["items"][0]["status"]["containerStatuses"]] == [0]


#: a load generator pod: THREADS loops POSTing a big batch to URL until the pod is deleted
LOADGEN = """
import json, sys, threading, urllib.request
url, threads = sys.argv[1], int(sys.argv[2])
rows = [[5.0 + i % 30 / 10, 3.0, 1.0 + i % 60 / 10, 0.2 + i % 20 / 10] for i in range(2000)]
tensor = {"name": "x", "shape": [len(rows), 4], "datatype": "FP64", "data": rows}
body = json.dumps({"inputs": [tensor]}).encode()
request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
def loop():
    while True:
        try:
            urllib.request.urlopen(request, timeout=10).read()
        except Exception as e:
            print(f"error: {e}", flush=True)
print("loading", flush=True)
for _ in range(threads):
    threading.Thread(target=loop, daemon=True).start()
threading.Event().wait()
"""


async def test_an_hpa_on_real_cpu_scales_up_under_load_and_back_without_the_operator_writing_replicas(
    admin_client: rclient.Client, ns: str
) -> None:
    low, high = 1, 3
    obj = iris("iris")
    obj["spec"]["predictor"]["autoscaling"] = {
        "minReplicas": low,
        "maxReplicas": high,
        "targetUtilization": {"cpu": 50},
    }
    await create(admin_client, ns, obj)
    await ready(admin_client, ns, "iris")

    async def replicas() -> int:
        d = await admin_client.get(resources.DEPLOYMENT, "iris-predictor", ns)
        return int(d["spec"].get("replicas", 0))

    url = f"http://iris-predictor.{ns}.svc:8080/v2/models/iris/infer"
    # one request at a time keeps the servers far above the target (50 % of a 100m request) and
    # burns at most one core of the machine, whatever the replicas
    await admin_client.create(resources.POD, rn.pod("loadgen", ["python3", "-c", LOADGEN, url, "1"]), ns)
    await wait.until(lambda: _at(replicas, high), timeout=300, what=f"the HPA scales to {high} on real CPU")
    await admin_client.delete(resources.POD, "loadgen", ns)
    await wait.until(lambda: _at(replicas, low), timeout=300, what=f"the HPA back to {low} without load")
    d = await admin_client.get(resources.DEPLOYMENT, "iris-predictor", ns)
    managed = d["metadata"]["managedFields"]
    owners = [m["manager"] for m in managed if "f:replicas" in (m.get("fieldsV1") or {}).get("f:spec", {})]
    assert owners == ["kube-controller-manager"], managed  # the HPA, through the scale subresource


async def _at(current: Any, want: int) -> bool:
    return bool(await current() == want)
