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
import dataclasses
import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mlops_platform import api, infer, why
from mlops_platform.devcluster import demo
from mlops_platform.devcluster.modelstore import install as modelstore
from mlops_platform.devcluster.modelstore import manifests as store
from mlops_platform.runtime.control import manager as rmanager
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.testing import operator as operator_process
from mlops_platform.testing import probes, wait, webhook
from mlops_platform.testing.plugin import Kubectl

QUICKSTART = [[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]  # KServe's first tutorial's input
READY_TIMEOUT = 240.0  # image already imported; the initializer, MLServer's start on a loaded 2-core machine


@pytest.fixture(scope="module")
async def serving_operator(
    kube_cluster: Path, local_cluster_name: str, admin_client: rclient.Client
) -> AsyncIterator[rmanager.Manager]:
    """The model store running (images imported, demo models uploaded) and the operator with the
    local cluster's settings."""
    await asyncio.to_thread(modelstore.install, local_cluster_name)
    await webhook.install_crd(admin_client)
    async with (
        rclient.Client.from_kubeconfig(str(kube_cluster)) as c,
        operator_process.running(c, settings=demo.local_settings()) as mgr,
    ):
        yield mgr


@pytest.fixture
async def ns(namespace: str, admin_client: rclient.Client, serving_operator: rmanager.Manager) -> str:
    """A namespace holding the store's Secret (``storage.secretName``)."""
    await modelstore.grant(admin_client, namespace)
    return namespace


def iris(
    name: str, uri: str = "s3://models/iris/1", *, memory: str = "1Gi", secret: str = store.CLIENT_SECRET
) -> Any:
    return {
        "apiVersion": "mlops.platform/v1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "predictor": {
                "runtime": "seldon",
                "model": {
                    "uri": uri,
                    "format": "sklearn",
                    "storage": {"secretName": secret, "endpoint": store.ENDPOINT},
                },
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": memory}},
            }
        },
    }


def v2(rows: list[list[float]]) -> dict[str, Any]:
    return {"inputs": [{"name": "input-0", "shape": [len(rows), 4], "datatype": "FP64", "data": rows}]}


def answer(response: Any) -> list[int]:
    return [int(v) for v in response["outputs"][0]["data"]]


async def create(c: rclient.Client, ns: str, obj: Any) -> None:
    await c.create(api.RESOURCE, obj, ns)


async def ready(c: rclient.Client, ns: str, name: str, timeout: float = READY_TIMEOUT) -> dict[str, Any]:
    async def serving() -> dict[str, Any] | None:
        live = await c.get(api.RESOURCE, name, ns)
        return live if probes.condition(live, "Ready").get("status") == "True" else None

    try:
        return await wait.until(serving, timeout=timeout, what=f"{ns}/{name} Ready")
    except TimeoutError:
        live = await c.get(api.RESOURCE, name, ns)
        raise AssertionError(f"{name} not Ready: {probes.condition(live, 'Ready')}") from None


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


@dataclasses.dataclass
class Load:
    """Requests one after another through the API server until stopped: each answer or error."""

    answers: list[list[int]] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)

    async def run(self, c: rclient.Client, ns: str, name: str) -> None:
        while True:
            try:
                self.answers.append(answer(await infer.infer(c, name, ns, v2(QUICKSTART))))
            except infer.InferError as e:
                self.errors.append(str(e))


@contextlib.asynccontextmanager
async def load(c: rclient.Client, ns: str, name: str) -> AsyncIterator[Load]:
    result = Load()
    task = asyncio.create_task(result.run(c, ns, name))
    try:
        yield result
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def rolled_out(c: rclient.Client, ns: str, deployment: str) -> bool:
    """The Deployment's rollout is over: every replica updated and available, no old pod left."""
    d = await c.get(resources.DEPLOYMENT, deployment, ns)
    st, want = d.get("status") or {}, d["spec"].get("replicas", 1)
    if st.get("observedGeneration", 0) < d["metadata"]["generation"]:
        return False
    if not st.get("updatedReplicas") == st.get("availableReplicas") == st.get("replicas") == want:
        return False
    pods = await c.list(
        resources.POD,
        ns,
        label_selector=f"app.kubernetes.io/instance={deployment.removesuffix('-predictor')}",
    )
    return bool(len(pods["items"]) == want)


async def test_a_model_update_rolls_out_under_load_with_zero_failed_requests(
    admin_client: rclient.Client, ns: str
) -> None:
    await create(admin_client, ns, iris("iris"))
    await ready(admin_client, ns, "iris")
    async with load(admin_client, ns, "iris") as traffic:
        await wait.until(lambda: len(traffic.answers) >= 20, timeout=60, what="20 answers of version 1")
        patch = {"spec": {"predictor": {"model": {"uri": "s3://models/iris/2"}}}}
        await admin_client.patch(api.RESOURCE, "iris", patch, namespace=ns)
        await wait.until(
            lambda: len(traffic.answers) >= 20 and all(a == [2, 2] for a in traffic.answers[-20:]),
            timeout=READY_TIMEOUT,
            what="20 answers in a row from version 2",
        )
        await wait.until(
            lambda: rolled_out(admin_client, ns, "iris-predictor"), timeout=120, what="the rollout over"
        )
        settled = len(traffic.answers)
        await wait.until(lambda: len(traffic.answers) >= settled + 20, timeout=60, what="20 more answers")
    assert traffic.errors == [], (
        f"{len(traffic.errors)} of {len(traffic.answers) + len(traffic.errors)} failed: {traffic.errors[:3]}"
    )
    assert traffic.answers[0] == [1, 1]
    assert all(a == [2, 2] for a in traffic.answers[settled:]), "version 1 answered after its pods were gone"


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
    ],
    ids=["missing-model", "wrong-credentials", "memory-limit"],
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
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "wrong"},
            "stringData": {"AWS_ACCESS_KEY_ID": "nobody", "AWS_SECRET_ACCESS_KEY": "not-the-secret"},
        }
        await admin_client.create(resources.SECRET, secret, ns)
        obj = iris(case, secret="wrong")
    else:
        obj = iris(case, memory="100Mi")  # MLServer with scikit-learn needs more
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
