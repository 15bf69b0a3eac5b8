"""``make demo``: the local cluster, the CRD, the operator, the samples, and their expected states.

Each sample in ``config/samples/`` says what it should reach in the annotation
``demo.mlops.platform/expect`` (``Ready=True``, ``Ready=False/ScaledToZero``, or several conditions:
``Ready=True,CanaryReady=True/Canary``); the demo waits for
every one, with progress, then prints ``kubectl get isvc``, the children and ``kubectl top pods``,
the commands that make each autoscaled sample scale (a simulated load, :mod:`usage`) and back, and
leaves the operator running (its PID file and log are in the cluster directory; ``dev down`` stops it
with the cluster).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

import yaml

from mlops_platform import api, infer
from mlops_platform.api import crd
from mlops_platform.controllers.inferenceservice import runtime_overrides, servers
from mlops_platform.controllers.inferenceservice.children import base
from mlops_platform.deploy import crdinstall
from mlops_platform.devcluster import binaries, cluster
from mlops_platform.devcluster.modelstore import install as modelstore
from mlops_platform.devcluster.realnode import images
from mlops_platform.runtime import objects, wait
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources

NAMESPACE = "mlops-demo"
EXPECT = "demo.mlops.platform/expect"
#: a sample served for real (on the real node) carries the request the demo sends it
REQUEST = "demo.mlops.platform/request"
FIELD_MANAGER = "mlops-demo"


def _log(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def samples_dir() -> Path:
    root = binaries.repo_root()
    if root is None:
        raise FileNotFoundError("the demo runs from a source checkout (config/samples)")
    return root / "config" / "samples"


def operator_pid_file(name: str) -> Path:
    return cluster.cluster_dir(name) / "mlops-operator.pid"


def operator_log(name: str) -> Path:
    return cluster.cluster_dir(name) / "mlops-operator.log"


def local_runtimes() -> Path:
    """The local cluster's runtime-table override (``--runtime-config``): MLServer's local image on
    the real node."""
    return Path(str(importlib_resources.files("mlops_platform.devcluster").joinpath("local-runtimes.yaml")))


#: the local cluster's scrape interval: a third of the default, so an alert or KEDA's trigger sees
#: a change within about 20 s on a cluster nobody else scrapes (the local Prometheus' only targets)
SCRAPE_INTERVAL = "10s"


def local_settings() -> base.BuildContext:
    """The same as :data:`LOCAL_FLAGS`, for an operator run in-process (the serving tests)."""
    table = runtime_overrides.load_overrides(yaml.safe_load(local_runtimes().read_text()))
    return base.BuildContext(
        servers=table, storage_initializer_image=images.OPERATOR.ref, scrape_interval=SCRAPE_INTERVAL
    )


#: the operator flags of the local cluster: its runtime table, its storage initializer's image and
#: its scrape interval
LOCAL_FLAGS = (
    "--runtime-config", str(local_runtimes()),
    "--storage-initializer-image", images.OPERATOR.ref,
    "--scrape-interval", SCRAPE_INTERVAL,
)  # fmt: skip

#: where the demo operator serves the conversion webhook (the CRD's URL on the local control plane)
WEBHOOK = "127.0.0.1:19443"
WEBHOOK_URL = f"https://{WEBHOOK}/convert"


def start_operator(name: str, *, health: str = "127.0.0.1:18081", metrics: str = "127.0.0.1:18080") -> int:
    """(Re)start the operator for cluster ``name`` in the background; return its PID."""
    stop_operator(name)
    cmd = [
        sys.executable, "-m", "mlops_platform.cli", "run",
        "--kubeconfig", str(cluster.kubeconfig_path(name)),
        "--health-probe-bind-address", health,
        "--metrics-bind-address", metrics,
        "--webhook-bind-address", WEBHOOK,
        *LOCAL_FLAGS,
    ]  # fmt: skip
    with open(operator_log(name), "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    operator_pid_file(name).write_text(str(proc.pid))
    return proc.pid


def _resource(sample: dict[str, Any]) -> rclient.Resource:
    """The REST resource of a sample's own apiVersion (the API server converts the older ones)."""
    version = str(sample["apiVersion"]).rpartition("/")[2]
    return rclient.Resource(crd.RESOURCE.group, version, crd.RESOURCE.plural, crd.RESOURCE.kind)


async def webhook_ready(c: rclient.Client) -> bool:
    """The operator injected its CA bundle into the CRD: the API server can call the webhook."""
    return bool(crdinstall.client_config(await c.get(resources.CRD, crd.CRD_NAME)).get("caBundle"))


def stop_operator(name: str) -> None:
    pid_file = operator_pid_file(name)
    if not pid_file.is_file():
        return
    pid = int(pid_file.read_text())
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            os.kill(pid, 0)
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)


def load_samples() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(samples_dir().glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def _state(obj: dict[str, Any], expect: str) -> str:
    """The object's state in the terms of ``expect``: ``Type=Status``, with ``/Reason`` when the
    status is not True or the expectation names a reason; comma-separated like ``expect``."""
    parts = []
    for item in expect.split(","):
        type_ = item.split("=", 1)[0]
        cond = objects.condition(obj, type_)
        if cond is None:
            parts.append(f"{type_}: no status yet")
            continue
        with_reason = cond["status"] != "True" or "/" in item
        parts.append(f"{type_}={cond['status']}" + (f"/{cond.get('reason')}" if with_reason else ""))
    return ",".join(parts)


async def _run(name: str, timeout: float) -> None:
    async with rclient.Client.from_kubeconfig(cluster.kubeconfig_path(name)) as c:
        _log("installing the InferenceService CRD (v1alpha1, v1beta1, v1; converted by the operator)")
        # as `mlops-platform install-crd --webhook-url WEBHOOK_URL` does: the CRD, and the namespace
        # of the webhook's certificate Secret; and the samples' namespace
        await crdinstall.install(c, webhook_url=WEBHOOK_URL, namespaces=(NAMESPACE,))
        _log("starting the operator")
        pid = start_operator(name)
        _log(f"operator PID {pid}, log {operator_log(name)}")
        await wait.until(
            lambda: webhook_ready(c), timeout=60, what="the conversion webhook's CA bundle in the CRD"
        )
        await wait.until(
            lambda: crd.converts(c, NAMESPACE), timeout=60, what="the API server converting through it"
        )
        samples = load_samples()
        for s in samples:
            s["metadata"]["namespace"] = NAMESPACE
            await c.apply(_resource(s), s, field_manager=FIELD_MANAGER)
            expect = s["metadata"]["annotations"][EXPECT]
            _log(f"applied {s['metadata']['name']} ({s['apiVersion']}, expect {expect})")
        isvc = crd.RESOURCE
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        pending = {objects.name(s): objects.annotations(s)[EXPECT] for s in samples}
        last = ""
        while pending:
            states = {n: _state(await c.get(isvc, n, NAMESPACE), pending[n]) for n in pending}
            line = ", ".join(f"{n}: {st}" for n, st in states.items())
            if line != last:
                _log(f"waiting: {line}")
                last = line
            for n, st in states.items():
                if st == pending[n]:
                    _log(f"{n} reached {st}")
                    del pending[n]
            if pending and loop.time() > deadline:
                raise TimeoutError(f"samples not in their expected state after {timeout:.0f}s: {states}")
            await asyncio.sleep(0.5)


# the simulated load `make demo` suggests, in % of the CPU request: well above any runtime's target
DEMO_LOAD_PERCENT = 150


def scaling_hints(samples: list[dict[str, Any]], name: str) -> list[str]:
    """For each sample an HPA scales (``minReplicas >= 1``, ``maxReplicas`` above it), the commands
    that load its pods above the HPA's target and back to idle."""
    table = servers.default_table()
    out: list[str] = []
    for s in samples:
        model = api.decode({**s, "metadata": {**s["metadata"], "namespace": NAMESPACE}})
        low, high = model.min_replicas, model.max_replicas
        if not 1 <= low < high:
            continue
        isvc = objects.name(s)
        target = model.autoscaling.cpu_utilization or table[model.framework].target_cpu_utilization
        cmd = f".venv/bin/mlops-platform dev load {isvc} -n {NAMESPACE} --name {name}"
        out += [
            f"Make {isvc} scale {low} -> {high}: its pods use {DEMO_LOAD_PERCENT} % of their CPU request "
            f"(its HPA targets {target} %):",
            f"  {cmd} --cpu {DEMO_LOAD_PERCENT}%",
            f"  kubectl get hpa {isvc}-predictor -n {NAMESPACE} -w   # about a minute to {high} replicas",
            f"Back to idle ({low} replicas after the 15 s downscale stabilization):",
            f"  {cmd} --clear",
        ]
    return out


async def predictions(name: str, samples: list[dict[str, Any]]) -> str:
    """Each sample that runs on the real node asked for a real prediction with the `infer` command
    the user can type; the others labelled as simulated (kwok nodes run no container)."""
    lines = [f"\nPredictions (export KUBECONFIG={cluster.kubeconfig_path(name)}):"]
    async with rclient.Client.from_kubeconfig(cluster.kubeconfig_path(name)) as c:
        for s in samples:
            isvc, request = objects.name(s), objects.annotations(s).get(REQUEST)
            if request is None:
                lines.append(f"  {isvc}: simulated (kwok nodes: its pods run no model server)")
                continue
            body = " ".join(request.split())
            lines.append(f"$ mlops-platform infer {isvc} -n {NAMESPACE} --json '{body}'")
            try:
                answer = await infer.infer(c, isvc, NAMESPACE, json.loads(body))
            except infer.InferError as e:
                raise RuntimeError(f"{isvc} did not answer: {e}") from None
            lines.append(json.dumps(answer))
    return "\n".join(lines)


def run(name: str = cluster.DEFAULT_NAME, *, timeout: float = 180.0) -> None:
    cluster.up(name)
    modelstore.install(name)
    asyncio.run(modelstore.grant_all(cluster.kubeconfig_path(name), [NAMESPACE]))
    asyncio.run(_run(name, timeout))
    for args in (
        ["get", "nodes", "-L", "mlops.platform/pool"],
        ["get", "isvc", "-n", NAMESPACE, "-o", "wide"],
        [
            "get",
            "deployments,services,hpa,virtualservices,networkpolicies,prometheusrules,servicemonitors,pods",
            "-n",
            NAMESPACE,
        ],
        ["top", "pods", "-n", NAMESPACE],
    ):
        print(f"\n$ kubectl {' '.join(args)}", flush=True)
        cluster.kubectl(name, args)
    print(asyncio.run(predictions(name, load_samples())), flush=True)
    hints = scaling_hints(load_samples(), name)
    print(
        f"\nThe operator keeps running (PID file {operator_pid_file(name)}, log {operator_log(name)}).\n"
        f"Use the cluster:     export KUBECONFIG={cluster.kubeconfig_path(name)}\n"
        f"Why (not) serving:   .venv/bin/mlops-platform dev why --name {name} iris -n {NAMESPACE}\n"
        f"Stop the operator:   .venv/bin/mlops-platform dev stop-operator --name {name}\n"
        f"Stop everything:     make cluster-down\n\n" + "\n".join(hints),
        flush=True,
    )
