"""Real model serving on the real worker node: the operator against the same server written by hand
(``make bench-serving``, issue #38).

On a local cluster (``dev up``, one real node; the model store installed, the operator run as
``mlops-platform run`` with the local cluster's flags, ``demo.LOCAL_FLAGS``):

1. **cold start**: ``kubectl apply`` -> the first successful prediction (the quickstart input through
   the API server's service proxy, tried every ``--poll`` s from the apply on), ``--runs`` times for
   each path, interleaved (the order alternates run by run), after ``--warmup`` runs of each that are
   not counted. The two paths:

   - **operator**: one InferenceService (:data:`ISVC_YAML`, the iris model of the e2e tests);
   - **hand-written**: a Deployment and a Service in static YAML (:data:`HAND_WRITTEN_YAML`): what a
     careful user writes without the operator. Its pod template is the one the operator builds for
     that InferenceService (the same images, init container, probes, resources, security context),
     minus the operator's bookkeeping labels and annotations.

   Where the time goes, per run and path (host clock; the real node shares the host's kernel and
   clock, so the container runtime's log timestamps compare with it): the pod observed (polled every
   ``--poll`` s), scheduled, the initializer's first log line, its ``model delivered`` line, the
   server's first log line and its ``Loaded model`` line, the pod observed Ready, the first answer.
   The phases between them add up to the total.
2. **latency**: both servers up side by side; a client pod on the real node (the locally built Python
   image, the script :data:`LOAD_SCRIPT` from a ConfigMap) sends the quickstart request to each
   Service's ClusterIP (resolved once) at ``--rate`` requests/s for ``--seconds`` s, open loop, a new
   connection per request, rounds in the order operator, hand-written, hand-written, operator
   (``--rounds`` pairs); each latency from the request's scheduled send time to the end of the
   answer; printed as JSON, read from the pod's log.
3. **download**: random objects of ``--blob-mib`` MiB each (default 64 and 256) put into the store by
   a pod of the operator's image (the model store's own upload module), then fetched ``--fetches``
   times each by a pod whose init container is the storage initializer exactly as in the pod template
   above (``--layout none``); the initializer's ``model delivered`` line gives bytes, seconds, MiB/s.

Results: ``docs/benchmarks/serving.md`` (``--out``); ``--json FILE`` also writes every run.

    .venv/bin/python -m bench.serving                        # its own cluster mlops-bench-serving
    .venv/bin/python -m bench.serving --name mlops-dev --runs 3   # an existing cluster, kept
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if __package__ in (None, ""):  # `python bench/serving.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import _common as common

if TYPE_CHECKING:
    from mlops_platform.runtime.transport.client import Client

REPO = Path(__file__).resolve().parents[1]
CLUSTER = "mlops-bench-serving"
NAMESPACE = "bench-serving"
OPERATOR, HAND = "operator", "hand-written"
PATHS = (OPERATOR, HAND)
QUICKSTART = [[6.8, 2.8, 4.8, 1.4], [6.0, 3.4, 4.5, 1.6]]  # KServe's first tutorial's input
BODY = {"inputs": [{"name": "input-0", "shape": [2, 4], "datatype": "FP64", "data": QUICKSTART}]}
EXPECTED = [1, 1]  # iris/1's answer to it
STORE_ENDPOINT = "http://minio.mlops-models.svc:9000"
#: the Service and the pods' label selector of each path (the operator's Service: ``<name>-predictor``)
SERVICE = {OPERATOR: "iris-predictor", HAND: "iris-raw"}
SELECTOR = {OPERATOR: "mlops.platform/inferenceservice=iris", HAND: "app=iris-raw"}
INFER_PATH = "/v2/models/iris/infer"
RUN_TIMEOUT = 300.0

ISVC_YAML = """\
apiVersion: mlops.platform/v1
kind: InferenceService
metadata:
  name: iris
spec:
  predictor:
    runtime: seldon
    model:
      uri: s3://models/iris/1
      format: sklearn
      storage: {secretName: model-store, endpoint: "http://minio.mlops-models.svc:9000"}
    resources:
      requests: {cpu: 100m, memory: 64Mi}
      limits: {memory: 1Gi}
"""

#: The same server without the operator: the pod template the operator builds for :data:`ISVC_YAML`
#: (its Deployment as the API server holds it, 2026-12-06), written out by hand.
HAND_WRITTEN_YAML = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: iris-raw
  labels: {app: iris-raw}
spec:
  replicas: 1
  selector:
    matchLabels: {app: iris-raw}
  strategy:
    type: RollingUpdate
    rollingUpdate: {maxSurge: 25%, maxUnavailable: 0}
  revisionHistoryLimit: 5
  progressDeadlineSeconds: 900
  template:
    metadata:
      labels: {app: iris-raw}
      annotations:
        kubectl.kubernetes.io/default-container: predictor
        prometheus.io/scrape: "true"
        prometheus.io/port: "8082"
        prometheus.io/path: /metrics
    spec:
      enableServiceLinks: false
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 60
      securityContext:
        runAsNonRoot: true
        runAsUser: 1000
        seccompProfile: {type: RuntimeDefault}
      nodeSelector: {mlops.platform/real-node: "true"}
      tolerations:
        - {key: mlops.platform/real-node, operator: Equal, value: "true", effect: NoSchedule}
      initContainers:
        - name: storage-initializer
          image: mlops.local/mlops-platform:0.1.0
          imagePullPolicy: IfNotPresent
          command: [python, -m, mlops_platform.storage]
          args:
            - fetch
            - s3://models/iris/1
            - /mnt/models
            - --layout
            - mlserver
            - --name
            - iris
            - --format
            - sklearn
            - --credentials
            - /var/run/secrets/mlops.platform/storage
            - --endpoint
            - http://minio.mlops-models.svc:9000
          resources:
            requests: {cpu: 100m, memory: 128Mi}
            limits: {memory: 512Mi}
          securityContext:
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            seccompProfile: {type: RuntimeDefault}
          terminationMessagePolicy: File
          volumeMounts:
            - {name: model-store, mountPath: /mnt/models}
            - {name: storage-scratch, mountPath: /tmp}
            - {name: storage-credentials, mountPath: /var/run/secrets/mlops.platform/storage, readOnly: true}
      containers:
        - name: predictor
          image: mlops.local/mlserver:1.7.1
          imagePullPolicy: IfNotPresent
          args: [mlserver, start, /mnt/models]
          env:
            - {name: MODEL_URI, value: s3://models/iris/1}
            - {name: MLSERVER_HTTP_PORT, value: "8080"}
            - {name: MLSERVER_GRPC_PORT, value: "8081"}
            - {name: MLSERVER_METRICS_PORT, value: "8082"}
            - {name: MLSERVER_MODELS_DIR, value: /mnt/models}
            - {name: MLSERVER_PARALLEL_WORKERS, value: "1"}
          ports:
            - {name: http, containerPort: 8080, protocol: TCP}
            - {name: grpc, containerPort: 8081, protocol: TCP}
            - {name: metrics, containerPort: 8082, protocol: TCP}
          readinessProbe:
            httpGet: {path: /v2/models/iris/ready, port: http}
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 3
          livenessProbe:
            httpGet: {path: /v2/health/live, port: http}
            periodSeconds: 10
            timeoutSeconds: 5
            failureThreshold: 3
          startupProbe:
            httpGet: {path: /v2/models/iris/ready, port: http}
            periodSeconds: 2
            timeoutSeconds: 5
            failureThreshold: 300
          resources:
            requests: {cpu: 100m, memory: 64Mi}
            limits: {memory: 1Gi}
          lifecycle:
            preStop: {sleep: {seconds: 5}}
          securityContext:
            allowPrivilegeEscalation: false
            capabilities: {drop: [ALL]}
          terminationMessagePolicy: FallbackToLogsOnError
          volumeMounts:
            - {name: model-store, mountPath: /mnt/models, readOnly: true}
      volumes:
        - {name: model-store, emptyDir: {}}
        - {name: storage-scratch, emptyDir: {}}
        - name: storage-credentials
          secret: {secretName: model-store, defaultMode: 0444}
---
apiVersion: v1
kind: Service
metadata:
  name: iris-raw
  labels: {app: iris-raw}
spec:
  selector: {app: iris-raw}
  ports:
    - {name: http, port: 8080, targetPort: http, protocol: TCP}
    - {name: metrics, port: 8082, targetPort: metrics, protocol: TCP}
"""

MANIFESTS = {OPERATOR: ISVC_YAML, HAND: HAND_WRITTEN_YAML}

#: ``python3 load.py HOST PORT PATH RATE SECONDS WARMUP BODY``: open-loop POSTs, one JSON line out
LOAD_SCRIPT = """\
import http.client, json, socket, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rate, seconds, warmup, body = float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
ip = socket.gethostbyname(host)  # once: every request goes to the ClusterIP itself


def one(due):
    errors = None
    try:
        conn = http.client.HTTPConnection(ip, port, timeout=10)
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        data = answer.read()
        conn.close()
        if answer.status != 200:
            errors = f"{answer.status} {data[:200]!r}"
    except Exception as e:
        errors = repr(e)
    return (time.perf_counter() - due) * 1000, errors


for _ in range(warmup):
    one(time.perf_counter())
pool = ThreadPoolExecutor(32)
n = int(rate * seconds)
start = time.perf_counter() + 0.1
futures, lateness = [], []
for i in range(n):
    due = start + i / rate
    wait = due - time.perf_counter()
    if wait > 0:
        time.sleep(wait)
    lateness.append((time.perf_counter() - due) * 1000)
    futures.append(pool.submit(one, due))
results = [f.result() for f in futures]
elapsed = time.perf_counter() - start
print(json.dumps({
    "ip": ip,
    "requests": n,
    "seconds": elapsed,
    "latencies_ms": [ms for ms, err in results if err is None],
    "errors": [err for _, err in results if err is not None][:20],
    "error_count": sum(1 for _, err in results if err is not None),
    "max_send_lateness_ms": max(lateness) if lateness else 0.0,
}), flush=True)
"""

#: ``python3 -c GENERATE DIR MIB...``: DIR/blob-<MIB>mib/model.bin of MIB random MiB each
GENERATE_SCRIPT = """\
import os, sys
for mib in sys.argv[2:]:
    d = os.path.join(sys.argv[1], f"blob-{mib}mib")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.bin"), "wb") as f:
        for _ in range(int(mib)):
            f.write(os.urandom(1 << 20))
    print(f"wrote {d}/model.bin ({mib} MiB)", flush=True)
"""


# ---------------------------------------------------------------------------------------------------
# pure parts: timestamps, milestones, phases, figures
# ---------------------------------------------------------------------------------------------------


def parse_time(value: str) -> float:
    """An RFC 3339 time (``...Z``, any fraction; nanoseconds are cut to microseconds) as Unix time."""
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def log_lines(text: str) -> list[tuple[float, str]]:
    """A pod log fetched with ``timestamps=true``: (the container runtime's time, the line) each."""
    out = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        with contextlib.suppress(ValueError):
            out.append((parse_time(stamp), rest))
    return out


def first_line(lines: Sequence[tuple[float, str]], containing: str = "") -> float | None:
    """The time of the first line containing ``containing`` (any line when empty)."""
    return next((t for t, line in lines if containing in line), None)


def delivered(lines: Sequence[tuple[float, str]]) -> dict[str, Any] | None:
    """The storage initializer's ``model delivered`` record (its JSON log line), with ``at``: the
    line's time."""
    for t, line in lines:
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("msg") == "model delivered":
                return record | {"at": t}
    return None


#: what a pod has reached, in order, as :func:`milestones` reads its status
MILESTONES = ("created", "scheduled", "initialized", "running", "ready")


def milestones(pod: Mapping[str, Any]) -> set[str]:
    """The milestones (:data:`MILESTONES`) the pod's status says it has reached."""
    status = pod.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    reached = {"created"}
    if conditions.get("PodScheduled") == "True":
        reached.add("scheduled")
    if conditions.get("Initialized") == "True":
        reached.add("initialized")
    if any("running" in (c.get("state") or {}) for c in status.get("containerStatuses") or []):
        reached.add("running")
    if conditions.get("Ready") == "True":
        reached.add("ready")
    return reached


def status_times(pod: Mapping[str, Any]) -> dict[str, float]:
    """The times the pod's own status records (to the second): created, scheduled, the initializer's
    start and end, the server's start, Ready."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    out: dict[str, float] = {}
    if meta.get("creationTimestamp"):
        out["created"] = parse_time(meta["creationTimestamp"])
    for c in status.get("conditions") or []:
        key = {"PodScheduled": "scheduled", "Initialized": "initialized", "Ready": "ready"}.get(c.get("type"))
        if key and c.get("status") == "True" and c.get("lastTransitionTime"):
            out[key] = parse_time(c["lastTransitionTime"])
    for prefix, statuses in (
        ("init", status.get("initContainerStatuses")),
        ("server", status.get("containerStatuses")),
    ):
        for c in statuses or []:
            state = c.get("state") or {}
            term, run = state.get("terminated") or {}, state.get("running") or {}
            started = term.get("startedAt") or run.get("startedAt")
            if started:
                out[f"{prefix}_started"] = parse_time(started)
            if term.get("finishedAt"):
                out[f"{prefix}_finished"] = parse_time(term["finishedAt"])
    return out


#: the cold start's phases, in order: (key, what it covers); the end of each is the next one's start
PHASES = (
    (
        "create",
        "apply -> pod exists (the operator's reconcile or none, the Deployment and ReplicaSet controllers)",
    ),
    ("schedule", "pod exists -> scheduled"),
    ("start", "scheduled -> the initializer's first log line (sandbox, image: local, no pull; Python start)"),
    ("download", "the initializer's first line -> `model delivered`"),
    ("server", "`model delivered` -> MLServer's first log line (initializer exit, server start, imports)"),
    ("load", "MLServer's first line -> `Loaded model`"),
    ("ready", "`Loaded model` -> pod Ready (a startup probe on the model every 2 s, then readiness)"),
    ("answer", "pod Ready -> first successful prediction (endpoints, kube-proxy, the poll)"),
)


def phases(
    t0: float,
    seen: Mapping[str, float],
    init_log: Sequence[tuple[float, str]],
    server_log: Sequence[tuple[float, str]],
    answered: float,
) -> dict[str, float | None]:
    """The phases (:data:`PHASES`) of one cold start that began at ``t0``: ``seen`` the milestones'
    first observation times (:func:`milestones`), the two containers' logs (:func:`log_lines`), the
    first answer's time. A point that is missing (a log line not found) makes its two phases
    ``None``; the others still add up to ``answered - t0``."""
    done = delivered(init_log)
    points: list[float | None] = [
        t0,
        seen.get("created"),
        seen.get("scheduled"),
        first_line(init_log),
        done["at"] if done else None,
        first_line(server_log),
        first_line(server_log, "Loaded model"),
        min(seen["ready"], answered) if "ready" in seen else None,  # both polled: the answer may come first
        answered,
    ]
    out: dict[str, float | None] = {}
    for (key, _), start, end in zip(PHASES, points, points[1:], strict=False):
        out[key] = end - start if start is not None and end is not None else None
    return out


def until_loaded(run_phases: Mapping[str, float | None]) -> float | None:
    """apply -> ``Loaded model``: the phases before the probes' (``None`` when one is missing)."""
    before = [run_phases.get(key) for key, _ in PHASES[: [k for k, _ in PHASES].index("ready")]]
    return None if any(x is None for x in before) else sum(x for x in before if x is not None)


def summary(xs: Iterable[float | None]) -> dict[str, float]:
    """p50, p95, p99, min, max and the count of the values that are not None (nan when none)."""
    got = [x for x in xs if x is not None]
    return {
        "n": float(len(got)),
        "p50": common.percentile(got, 50),
        "p95": common.percentile(got, 95),
        "p99": common.percentile(got, 99),
        "min": min(got) if got else float("nan"),
        "max": max(got) if got else float("nan"),
    }


def interleaved(runs: int, warmup: int) -> list[tuple[int, str, bool]]:
    """(run number, path, counted) in the order they run: ``warmup`` uncounted rounds, then ``runs``;
    each round runs both paths, the first path alternating round by round (A B, B A, ...)."""
    out = []
    for i in range(warmup + runs):
        order = PATHS if i % 2 == 0 else PATHS[::-1]
        out += [(i - warmup + 1, p, i >= warmup) for p in order]
    return out


def abba(rounds: int) -> list[str]:
    """The latency rounds' order: operator, hand-written, hand-written, operator, ... (``rounds`` pairs)."""
    return [p for i in range(rounds) for p in (PATHS if i % 2 == 0 else PATHS[::-1])]


# ---------------------------------------------------------------------------------------------------
# the cluster side
# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ColdStart:
    path: str
    run: int
    counted: bool
    total: float
    phases: dict[str, float | None]
    delivered: dict[str, Any] | None
    status_times: dict[str, float]
    t0: float
    usage: dict[str, float] = dataclasses.field(default_factory=dict)
    pods: int = 1


def _usage_now(pid: int) -> tuple[float, float, float]:
    """(wall clock, the operator's CPU seconds, the machine's busy CPU seconds)."""
    return time.monotonic(), common.read_proc(pid).cpu_seconds, common.read_machine().busy_seconds


def usage_since(before: tuple[float, float, float], after: tuple[float, float, float]) -> dict[str, float]:
    """What the operator and the whole machine used between two :func:`_usage_now` readings: the
    operator's CPU seconds, and the machine's busy CPUs on average (every process: the cluster's,
    the benchmark's and the other engineers' on the same machine)."""
    wall = after[0] - before[0]
    return {
        "operator_cpu_seconds": after[1] - before[1],
        "machine_busy_cpus": (after[2] - before[2]) / wall if wall > 0 else float("nan"),
    }


def _kubectl() -> str:
    from mlops_platform.devcluster import binaries

    return str(binaries.find(build=False, names=("kubectl",))["kubectl"])


async def _kubectl_apply(kubeconfig: str, text: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        _kubectl(), "--kubeconfig", kubeconfig, "apply", "-n", NAMESPACE, "-f", "-",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate(text.encode())
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl apply failed ({proc.returncode}): {err.decode()} {out.decode()}")


async def _predict(c: Client, path: str) -> Any:
    proxy = f"/api/v1/namespaces/{NAMESPACE}/services/http:{SERVICE[path]}:http/proxy{INFER_PATH}"
    return await c.request(
        "POST", proxy, body=BODY, resource="services/proxy", namespace=NAMESPACE, timeout=10
    )


async def _answers(c: Client, path: str) -> bool:
    try:
        answer = await _predict(c, path)
    except Exception:  # no Service, no endpoints, not loaded yet: not yet
        return False
    return [int(v) for v in answer["outputs"][0]["data"]] == EXPECTED


async def _wait_answers(c: Client, path: str) -> None:
    from mlops_platform.runtime import wait

    await wait.until(lambda: _answers(c, path), timeout=RUN_TIMEOUT, interval=0.5, what=f"{path}: an answer")


async def _pods(c: Client, path: str) -> list[dict[str, Any]]:
    from mlops_platform.runtime.transport import resources

    return list((await c.list(resources.POD, NAMESPACE, label_selector=SELECTOR[path]))["items"])


async def _kubectl_logs(kubeconfig: str, pod: str, container: str, *, timestamps: bool = True) -> str:
    """``kubectl logs`` of one container (the API server answers 406 to the client's ``request_text``,
    which asks for ``text/plain`` only)."""
    args = ["logs", "-n", NAMESPACE, pod, "-c", container] + (["--timestamps"] if timestamps else [])
    proc = await asyncio.create_subprocess_exec(
        _kubectl(), "--kubeconfig", kubeconfig, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"kubectl logs {pod} -c {container} failed ({proc.returncode}): {err.decode()}")
    return out.decode(errors="replace")


async def cold_start(
    c: Client, kubeconfig: str, path: str, run: int, counted: bool, poll: float
) -> ColdStart:
    """``kubectl apply`` of one path's manifest until its first correct answer; then its phases."""
    from mlops_platform.runtime import wait

    seen: dict[str, float] = {}
    pod_name: list[str] = []
    names: set[str] = set()  # every pod of the path seen during the run: 1 unless something rolled

    async def observe() -> bool:
        while "ready" not in seen:
            pods = await _pods(c, path)
            now = time.time()
            names.update(p["metadata"]["name"] for p in pods)
            if pods:
                pod_name[:] = [pods[0]["metadata"]["name"]]
                for m in milestones(pods[0]):
                    seen.setdefault(m, now)
            await asyncio.sleep(poll)
        return True

    t0 = time.time()
    watcher = asyncio.create_task(observe())
    await _kubectl_apply(kubeconfig, MANIFESTS[path])
    await wait.until(lambda: _answers(c, path), timeout=RUN_TIMEOUT, interval=poll, what=f"{path}: an answer")
    answered = time.time()
    await asyncio.wait_for(watcher, 30)  # the answer needs a Ready pod: the watcher sees it at once
    pod = (await _pods(c, path))[0]
    init_log = log_lines(await _kubectl_logs(kubeconfig, pod_name[0], "storage-initializer"))
    server_log = log_lines(await _kubectl_logs(kubeconfig, pod_name[0], "predictor"))
    return ColdStart(
        path=path,
        run=run,
        counted=counted,
        total=answered - t0,
        phases=phases(t0, seen, init_log, server_log, answered),
        delivered=delivered(init_log),
        status_times={k: v - t0 for k, v in status_times(pod).items()},
        t0=t0,
        pods=len(names | {p["metadata"]["name"] for p in await _pods(c, path)}),
    )


async def remove(c: Client, path: str) -> None:
    """Delete one path's objects and wait until they and their pods are gone."""
    from mlops_platform import api
    from mlops_platform.runtime import wait
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    targets = (
        [(api.RESOURCE, "iris")]
        if path == OPERATOR
        else [(resources.DEPLOYMENT, "iris-raw"), (resources.SERVICE, "iris-raw")]
    )
    for res, name in targets:
        with contextlib.suppress(rclient.ApiError):
            await c.delete(res, name, NAMESPACE, propagation_policy="Background")

    async def gone() -> bool:
        for res, name in [
            *targets,
            (resources.DEPLOYMENT, SERVICE[path]),
            (resources.SERVICE, SERVICE[path]),
        ]:
            try:
                await c.get(res, name, NAMESPACE)
                return False
            except rclient.ApiError as e:
                if not e.not_found:
                    raise
        return not await _pods(c, path)

    await wait.until(gone, timeout=180, interval=0.5, what=f"{path}: its objects and pods gone")


async def latency_round(
    c: Client, kubeconfig: str, path: str, i: int, rate: float, seconds: float
) -> dict[str, Any]:
    """One client pod sending to ``path``'s Service; what it printed."""
    from mlops_platform.runtime import wait
    from mlops_platform.runtime.transport import resources
    from mlops_platform.testing import realnode as rn

    name = f"load-{i}-{'op' if path == OPERATOR else 'raw'}"
    host = f"{SERVICE[path]}.{NAMESPACE}.svc"
    cmd = [
        "python3",
        "/scripts/load.py",
        host,
        "8080",
        INFER_PATH,
        str(rate),
        str(seconds),
        "20",
        json.dumps(BODY),
    ]
    pod = rn.pod(name, cmd, restart_policy="Never", limits={"memory": "128Mi"})
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "100m"
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "scripts", "mountPath": "/scripts"}]
    pod["spec"]["volumes"] = [{"name": "scripts", "configMap": {"name": "bench-serving-load"}}]
    await c.create(resources.POD, pod, NAMESPACE)

    async def ended() -> str | None:
        phase = ((await c.get(resources.POD, name, NAMESPACE)).get("status") or {}).get("phase")
        return str(phase) if phase in ("Succeeded", "Failed") else None

    phase = await wait.until(ended, timeout=seconds + 120, interval=1, what=f"client pod {name} ended")
    text = await _kubectl_logs(kubeconfig, name, "main", timestamps=False)
    await c.delete(resources.POD, name, NAMESPACE)
    if phase != "Succeeded":
        raise RuntimeError(f"client pod {name} {phase}: {text[-2000:]}")
    result: dict[str, Any] = json.loads(text.strip().splitlines()[-1])
    return result | {"path": path, "round": i}


def _upload_pod(mibs: Sequence[int]) -> dict[str, Any]:
    """A pod in the store's namespace that writes random objects and puts them into the bucket
    (the seeding Job's upload step, the same module and image)."""
    from mlops_platform.devcluster.modelstore import manifests as store
    from mlops_platform.devcluster.realnode import configs, images

    mounts = [{"name": "blobs", "mountPath": "/blobs"}]
    security = {"allowPrivilegeEscalation": False}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bench-serving-blobs", "namespace": store.NAMESPACE},
        "spec": {
            **configs.PLACEMENT,
            "restartPolicy": "Never",
            "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "runAsNonRoot": True},
            "initContainers": [
                {
                    "name": "generate",
                    "image": images.PYTHON.ref,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python3", "-c", GENERATE_SCRIPT, "/blobs/bench", *map(str, mibs)],
                    "securityContext": security,
                    "volumeMounts": mounts,
                }
            ],
            "containers": [
                store.upload_container("/blobs", mounts) | {"resources": {"limits": {"memory": "1Gi"}}}
            ],
            "volumes": [{"name": "blobs", "emptyDir": {}}],
        },
    }


def fetch_pod(name: str, uri: str) -> dict[str, Any]:
    """A pod whose init container is the hand-written template's storage initializer (the operator's)
    fetching ``uri`` with ``--layout none``; its one container lists what arrived."""
    template = next(d for d in yaml.safe_load_all(HAND_WRITTEN_YAML) if d["kind"] == "Deployment")["spec"][
        "template"
    ]
    spec = template["spec"]
    init = dict(spec["initContainers"][0])
    args = list(init["args"])
    args[1] = uri
    args[args.index("--layout") + 1] = "none"
    i = args.index("--format")
    del args[i : i + 2]
    init["args"] = args
    server = dict(spec["containers"][0])
    lister = {
        "name": "list",
        "image": "mlops.local/python:3.11-bookworm",
        "imagePullPolicy": "IfNotPresent",
        "command": [
            "python3",
            "-c",
            "import os; print([(f, os.path.getsize('/mnt/models/' + f)) for f in os.listdir('/mnt/models')])",
        ],
        "securityContext": server["securityContext"],
        "volumeMounts": server["volumeMounts"],
    }
    pod_spec = {k: v for k, v in spec.items() if k not in ("containers", "initContainers")}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": pod_spec | {"restartPolicy": "Never", "initContainers": [init], "containers": [lister]},
    }


async def _run_pod(c: Client, pod: dict[str, Any], namespace: str, timeout: float) -> dict[str, Any]:
    """Create ``pod`` and wait until it ended; the pod (raises when it failed)."""
    from mlops_platform.runtime import wait
    from mlops_platform.runtime.transport import resources

    name = pod["metadata"]["name"]
    await c.create(resources.POD, pod, namespace)

    async def ended() -> dict[str, Any] | None:
        live = await c.get(resources.POD, name, namespace)
        return live if (live.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None

    live = await wait.until(ended, timeout=timeout, interval=0.5, what=f"pod {namespace}/{name} ended")
    if live["status"]["phase"] != "Succeeded":
        raise RuntimeError(f"pod {namespace}/{name} failed: {live['status']}")
    return dict(live)


async def download(c: Client, kubeconfig: str, mibs: Sequence[int], fetches: int) -> list[dict[str, Any]]:
    from mlops_platform.devcluster.modelstore import manifests as store
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    upload = _upload_pod(mibs)
    with contextlib.suppress(rclient.ApiError):
        await c.delete(resources.POD, upload["metadata"]["name"], store.NAMESPACE)
    common.log(
        f"download: writing and uploading {', '.join(f'{m} MiB' for m in mibs)} of random bytes"
        " into the store"
    )
    t0 = time.monotonic()
    await _run_pod(c, upload, store.NAMESPACE, 600)
    common.log(f"download: uploaded in {time.monotonic() - t0:.0f} s")
    await c.delete(resources.POD, upload["metadata"]["name"], store.NAMESPACE)
    out = []
    for i in range(fetches):
        for mib in mibs:
            name = f"fetch-{mib}mib-{i}"
            live = await _run_pod(c, fetch_pod(name, f"s3://models/bench/blob-{mib}mib"), NAMESPACE, 600)
            record = delivered(log_lines(await _kubectl_logs(kubeconfig, name, "storage-initializer")))
            if record is None:
                raise RuntimeError(f"pod {name}: no `model delivered` line")
            times = status_times(live)
            await c.delete(resources.POD, name, NAMESPACE)
            out.append(
                {
                    "mib": mib,
                    "fetch": i,
                    "bytes": record["bytes"],
                    "seconds": record["seconds"],
                    "mib_per_second": record["mib_per_second"],
                    "init_container_seconds": times.get("init_finished", 0.0)
                    - times.get("init_started", 0.0),
                }
            )
            common.log(
                f"download {i + 1}/{fetches}: {mib} MiB in {record['seconds']:.2f} s,"
                f" {record['mib_per_second']} MiB/s"
            )
    return out


@dataclasses.dataclass
class Operator:
    proc: subprocess.Popen[bytes]
    log_path: Path


def start_operator(kubeconfig: str, log_dir: Path, *extra: str) -> Operator:
    """``mlops-platform run`` with the local cluster's flags, as the demo starts it, and ``extra``."""
    from mlops_platform.devcluster import demo

    cmd = [
        sys.executable, "-m", "mlops_platform.cli", "run",
        "--kubeconfig", kubeconfig,
        "--health-probe-bind-address", "127.0.0.1:0",
        "--metrics-bind-address", "127.0.0.1:0",
        "--webhook-bind-address", "off",
        *demo.LOCAL_FLAGS,
        *extra,
    ]  # fmt: skip
    log_path = log_dir / "operator.log"
    common.log(f"starting the operator (log {log_path})")
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return Operator(proc, log_path)


async def operator_started(op: Operator) -> None:
    from mlops_platform.runtime import wait

    def started() -> bool:
        if op.proc.poll() is not None:
            raise SystemExit(f"the operator exited ({op.proc.returncode}): {op.log_path.read_text()[-2000:]}")
        return '"starting controllers"' in op.log_path.read_text(errors="replace")

    await wait.until(started, timeout=120, interval=0.5, what="the operator started", retry_on=())


def stop_operator(op: Operator) -> None:
    if op.proc.poll() is None:
        op.proc.send_signal(signal.SIGTERM)
        try:
            op.proc.wait(60)
        except subprocess.TimeoutExpired:
            op.proc.kill()
            op.proc.wait()


async def prepare_namespace(c: Client, namespace: str) -> None:
    """``namespace`` (after an earlier run's has gone) with the store's Secret; the CRD (v1 only)
    when missing."""
    from mlops_platform import api
    from mlops_platform.devcluster.modelstore import install as modelstore
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    try:
        await c.get(resources.CRD, api.CRD_NAME)
    except rclient.ApiError as e:
        if not e.not_found:
            raise
        await common.install_crd(c)
    if await common.wait_while_terminating(c, namespace) is None:
        await c.create(
            resources.NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    await modelstore.grant(c, namespace)


async def prepare(c: Client, cluster: str) -> None:
    """The namespace with the store's Secret and the load script; the CRD (v1 only) when missing."""
    from mlops_platform.runtime.transport import resources

    await prepare_namespace(c, NAMESPACE)
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "bench-serving-load", "namespace": NAMESPACE},
        "data": {"load.py": LOAD_SCRIPT},
    }
    await c.apply(resources.CONFIG_MAP, cm, field_manager="bench-serving")
    for path in PATHS:
        await remove(c, path)


async def measure(a: argparse.Namespace, kubeconfig: str, log_dir: Path) -> dict[str, Any]:
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources

    result: dict[str, Any] = {}
    async with rclient.Client.from_kubeconfig(kubeconfig) as c:
        await prepare(c, a.name)
        op = start_operator(kubeconfig, log_dir)
        try:
            await operator_started(op)
            starts: list[dict[str, Any]] = []
            order = interleaved(a.runs, a.warmup)
            for k, (run, path, counted) in enumerate(order, 1):
                what = f"run {run}/{a.runs}" if counted else "warm-up"
                before = _usage_now(op.proc.pid)
                cs = await cold_start(c, kubeconfig, path, run, counted, a.poll)
                cs.usage = usage_since(before, _usage_now(op.proc.pid))
                starts.append(dataclasses.asdict(cs))
                detail = ", ".join(f"{key} {v:.1f}" for key, v in cs.phases.items() if v is not None)
                common.log(f"cold start [{k}/{len(order)}] {what} {path}: {cs.total:.2f} s ({detail})")
                await remove(c, path)
            result["cold_start"] = starts
            common.log("latency: both servers up")
            for path in PATHS:
                await _kubectl_apply(kubeconfig, MANIFESTS[path])
            for path in PATHS:
                await _wait_answers(c, path)
            rounds = []
            for i, path in enumerate(abba(a.rounds), 1):
                common.log(
                    f"latency [{i}/{2 * a.rounds}] {path}: {a.rate:g} req/s for {a.seconds:g} s"
                    " from a client pod"
                )
                before = _usage_now(op.proc.pid)
                r = await latency_round(c, kubeconfig, path, i, a.rate, a.seconds)
                r["usage"] = usage_since(before, _usage_now(op.proc.pid))
                ms = r["latencies_ms"]
                common.log(
                    f"latency [{i}/{2 * a.rounds}] {path}: p50 {common.percentile(ms, 50):.1f} ms,"
                    f" p99 {common.percentile(ms, 99):.1f} ms, {r['error_count']} errors, to {r['ip']}"
                )
                rounds.append(r)
            result["latency"] = rounds
            policies = await c.list(resources.NETWORK_POLICY, NAMESPACE)
            result["network_policies"] = [p["metadata"]["name"] for p in policies["items"]]
            for path in PATHS:
                await remove(c, path)
        finally:
            stop_operator(op)
        result["download"] = await download(c, kubeconfig, a.blob_mib, a.fetches)
        await common.delete_namespace(c, NAMESPACE, 300, 1)
    return result


# ---------------------------------------------------------------------------------------------------
# figures and the Markdown
# ---------------------------------------------------------------------------------------------------


def figures(r: Mapping[str, Any]) -> dict[str, Any]:
    """The summary of a result: per path the cold start's total and phases, the latencies, the
    download rates."""
    counted = [s for s in r["cold_start"] if s["counted"]]
    cold: dict[str, dict[str, Any]] = {}
    for path in PATHS:
        mine = [s for s in counted if s["path"] == path]
        cold[path] = {
            "total": summary(s["total"] for s in mine),
            "phases": {key: summary(s["phases"][key] for s in mine) for key, _ in PHASES},
            "loaded": summary(until_loaded(s["phases"]) for s in mine),
            "download_seconds": summary((s["delivered"] or {}).get("seconds") for s in mine),
        }
    lat = {}
    for path in PATHS:
        rounds = [x for x in r["latency"] if x["path"] == path]
        ms = [v for x in rounds for v in x["latencies_ms"]]
        lat[path] = summary(ms) | {
            "requests": float(sum(x["requests"] for x in rounds)),
            "errors": float(sum(x["error_count"] for x in rounds)),
        }
    dl: dict[int, dict[str, float]] = {}
    for mib in sorted({d["mib"] for d in r["download"]}):
        mine = [d for d in r["download"] if d["mib"] == mib]
        dl[mib] = {
            "mib_per_second": common.percentile([d["mib_per_second"] for d in mine], 50),
            "seconds": common.percentile([d["seconds"] for d in mine], 50),
            "init_container_seconds": common.percentile([d["init_container_seconds"] for d in mine], 50),
            "n": float(len(mine)),
            "min_mib_per_second": min(d["mib_per_second"] for d in mine),
            "max_mib_per_second": max(d["mib_per_second"] for d in mine),
        }
    ratio = cold[OPERATOR]["total"]["p50"] / cold[HAND]["total"]["p50"]
    loaded_ratio = cold[OPERATOR]["loaded"]["p50"] / cold[HAND]["loaded"]["p50"]
    return {
        "cold_start": cold,
        "latency": lat,
        "download": dl,
        "cold_start_ratio_p50": ratio,
        "until_loaded_ratio_p50": loaded_ratio,
    }


def per_run_table(starts: Sequence[Mapping[str, Any]]) -> str:
    """Every counted cold start in the order it ran: its total, until ``Loaded model``, and the wait
    for the probes."""
    rows = [
        [
            str(s["run"]),
            s["path"],
            _s(s["total"]),
            _s(until_loaded(s["phases"])),
            _s(s["phases"]["server"]),
            _s(s["phases"]["load"]),
            _s(s["phases"]["ready"]),
            str(s.get("pods", "n/a")),
            *_usage_cells(s.get("usage") or {}),
        ]
        for s in starts
        if s["counted"]
    ]
    return common.markdown_table(
        [
            "run",
            "path",
            "total (s)",
            "to `Loaded model` (s)",
            "of it `server` (s)",
            "`load` (s)",
            "`Loaded model` -> Ready (s)",
            "pods",
            *USAGE_HEADER,
        ],
        rows,
    )


USAGE_HEADER = ("operator CPU (s)", "machine busy CPUs")


def _usage_cells(usage: Mapping[str, float]) -> list[str]:
    return [_s(usage.get("operator_cpu_seconds")), _s(usage.get("machine_busy_cpus"))]


def per_round_table(rounds: Sequence[Mapping[str, Any]]) -> str:
    rows = [
        [
            str(x["round"]),
            x["path"],
            str(x["error_count"]),
            _s(common.percentile(x["latencies_ms"], 50)),
            _s(common.percentile(x["latencies_ms"], 99)),
            _s(x.get("max_send_lateness_ms")),
            *_usage_cells(x.get("usage") or {}),
        ]
        for x in rounds
    ]
    header = ["round", "path", "errors", "p50 (ms)", "p99 (ms)", "client's worst send lateness (ms)"]
    return common.markdown_table([*header, *USAGE_HEADER], rows)


def _s(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{x:.2f}"


def render(r: Mapping[str, Any]) -> str:
    f = figures(r)
    cold, lat, args = f["cold_start"], f["latency"], r["arguments"]
    ratio = f["cold_start_ratio_p50"]
    verdict = "met" if ratio <= 1.10 else "not met"
    head = (
        "# Serving on the real node: the operator against the same server written by hand\n\n"
        f"`{r['command']}` (`make bench-serving`) on {r['machine']['date']}, {r['machine']['cpus']} CPUs. "
        "**A shared machine**: other engineers' tests ran on the same 2 cores meanwhile, so the "
        "figures carry their noise; the two paths ran interleaved in the same run on the same node, so "
        "they share it.\n\n"
        "The server: MLServer 1.7.1 (the local image) serving the iris scikit-learn model "
        "`s3://models/iris/1` from the in-cluster model store (MinIO), on the real node `real-node-0`. "
        "The operator's path is one InferenceService; the hand-written path a Deployment and a Service "
        "in static YAML whose pod template is the one the operator builds for it (`bench/serving.py`, "
        "`HAND_WRITTEN_YAML`). The operator ran as `mlops-platform run` with the local cluster's flags.\n\n"
    )
    rows = [
        [
            path,
            str(int(cold[path]["total"]["n"])),
            _s(cold[path]["total"]["p50"]),
            _s(cold[path]["total"]["p95"]),
            f"{_s(cold[path]['total']['min'])} - {_s(cold[path]['total']['max'])}",
            _s(cold[path]["loaded"]["p50"]),
            _s(cold[path]["loaded"]["p95"]),
        ]
        for path in PATHS
    ]
    cold_md = (
        f"## Cold start: `kubectl apply` -> first successful prediction\n\n"
        f"{args['runs']} runs per path after {args['warmup']} warm-up run(s) each (not counted), interleaved "
        f"(the first path alternating); the prediction tried every {args['poll']:g} s from the apply on, "
        "through the API server's service proxy; each path's objects and pods deleted and gone before "
        "the next run.\n\n"
        + common.markdown_table(
            ["path", "runs", "p50 (s)", "p95 (s)", "min - max (s)", "to `Loaded model` p50 (s)", "p95 (s)"],
            rows,
        )
        + f"\n\n**operator / hand-written, p50: {ratio:.2f}x** (goal <= 1.10x: {verdict}).\n\n"
        "Where the time goes, p50 per phase (s; the phases of one run add up to its total, their p50s "
        "need not):\n\n"
        + common.markdown_table(
            ["phase", "what", *PATHS],
            [[key, what, *(_s(cold[p]["phases"][key]["p50"]) for p in PATHS)] for key, what in PHASES],
        )
        + "\n\nThe pod observed, scheduled and Ready are the benchmark's observations (polled every "
        f"{args['poll']:g} s); the four log lines are the container runtime's timestamps. "
        "The initializer's own `model delivered ... seconds` (the download itself): p50 "
        + ", ".join(f"{p} {1000 * cold[p]['download_seconds']['p50']:.0f} ms" for p in PATHS)
        + ". No image is pulled: both images are on the node already (imported into its containerd, "
        "`imagePullPolicy: IfNotPresent`), so `start` is the pod sandbox, the container's creation and "
        "the initializer's Python start.\n\n"
        "Every run, in the order they ran (`pods`: the path's pods seen during the run):\n\n"
        + per_run_table(r["cold_start"])
        + "\n\n**Reading.** Both paths run the same pod template (a unit test keeps the YAML equal to what "
        "the operator builds), one pod a run (the `pods` column: the path's pods seen during the run). "
        "The operator's own work is the `create` phase (its reconcile before the Deployment exists): "
        + " against ".join(f"{_s(cold[p]['phases']['create']['p50'])} s" for p in PATHS)
        + " p50, and its CPU seconds per run (the column). `server` and `load` are MLServer's start and "
        "model load inside the pod, the same work on both paths, and stretch when the 2 cores are busy "
        "(the busy CPUs column). Apply -> `Loaded model` p50: operator / hand-written "
        f"{f['until_loaded_ratio_p50']:.2f}x; with {args['runs']} runs a path on a shared machine that ratio "
        "carries "
        "the machine's noise, and this benchmark does not separate an effect of the operator on the "
        "pod's start (the control plane's work for its status writes and its other children, on the "
        "same 2 cores) from the other load on the machine. `Loaded model` -> Ready (p50 "
        + " and ".join(f"{_s(cold[p]['phases']['ready']['p50'])} s" for p in PATHS)
        + ") is the startup probe asking MLServer about the model every 2 s, then the readiness probe "
        "at once: the totals are the server's start and the model load, whichever the path.\n"
    )
    lat_rows = [
        [
            path,
            str(int(lat[path]["requests"])),
            str(int(lat[path]["errors"])),
            _s(lat[path]["p50"]),
            _s(lat[path]["p99"]),
            _s(lat[path]["max"]),
        ]
        for path in PATHS
    ]
    lat_md = (
        "\n## Request latency through the Service\n\n"
        f"A client pod on the real node, {args['rate']:g} requests/s for {args['seconds']:g} s per round, "
        "open loop "
        "(each request sent at its scheduled time by a pool of threads, a new TCP connection each, to the "
        "Service's ClusterIP resolved once), latency from the scheduled send to the end of the answer; "
        f"{2 * args['rounds']} rounds in the order {', '.join(abba(args['rounds']))}, both servers up "
        "throughout.\n\n"
        + common.markdown_table(["path", "requests", "errors", "p50 (ms)", "p99 (ms)", "max (ms)"], lat_rows)
        + f"\n\noperator / hand-written: p50 {lat[OPERATOR]['p50'] / lat[HAND]['p50']:.2f}x, "
        f"p99 {lat[OPERATOR]['p99'] / lat[HAND]['p99']:.2f}x. Both paths are a ClusterIP Service in "
        "front of the same pod: the operator is not in the data path (its Service selects the pod by "
        "label as the hand-written one does; no sidecar, no proxy in between). NetworkPolicies in the "
        f"namespace during the rounds: {', '.join(r['network_policies']) or 'none'}. Each round:\n\n"
        + per_round_table(r["latency"])
        + "\n\nThe machine's busy CPUs count every process on it (the cluster, the benchmark, the client, "
        "and other engineers' work on the same 2 cores): the round-to-round spread of the tail is the "
        "machine's, not a path's.\n"
    )
    dl_rows = [
        [
            f"{mib} MiB",
            str(int(d["n"])),
            _s(d["seconds"]),
            f"{d['mib_per_second']:.1f}",
            f"{d['min_mib_per_second']:.1f} - {d['max_mib_per_second']:.1f}",
            _s(d["init_container_seconds"]),
        ]
        for mib, d in f["download"].items()
    ]
    dl_md = (
        "\n## Download: the storage initializer from the in-cluster store\n\n"
        "Random bytes (incompressible) put into the store, then fetched by a pod whose init container is "
        "the storage initializer exactly as in the pod template above (`--layout none`), from MinIO on the "
        "same node through its ClusterIP; the initializer's `model delivered` line (bytes, seconds, MiB/s: "
        "download, checksum and move into the model directory). The init container's run is its status' "
        "start and end (1 s resolution: Python's start included). The objects were written moments "
        "before: MinIO's reads may come from the page cache (a read from a cold disk is not measured).\n\n"
        + common.markdown_table(
            ["object", "fetches", "p50 seconds", "p50 MiB/s", "min - max MiB/s", "init container run (s)"],
            dl_rows,
        )
        + "\n"
    )
    return head + cold_md + lat_md + dl_md


# ---------------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--name",
        default=None,
        help=f"an existing local cluster (kept); default: {CLUSTER}, started and taken down",
    )
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument(
        "--poll", type=float, default=0.1, help="seconds between observations and prediction tries"
    )
    p.add_argument("--rate", type=float, default=20.0, help="requests per second of the latency rounds")
    p.add_argument("--seconds", type=float, default=30.0, help="length of each latency round")
    p.add_argument("--rounds", type=int, default=2, help="latency round pairs (ABBA order)")
    p.add_argument("--blob-mib", type=int, nargs="+", default=[64, 256])
    p.add_argument("--fetches", type=int, default=3)
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    p.add_argument("--json", help="also write every run to this file")
    p.add_argument("--report", metavar="JSON", help="run nothing: write the Markdown of a saved --json")
    a = p.parse_args(argv)
    if a.report:
        return write_report(json.loads(Path(a.report).read_text()), Path(a.out))
    out, machine, arguments = common.results_dir(a, REPO)
    from mlops_platform.devcluster.modelstore import install as modelstore

    with common.cluster_for(a.name, CLUSTER, keep=a.keep_cluster) as (a.name, kubeconfig):
        modelstore.install(a.name)
        with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
            result = asyncio.run(measure(a, kubeconfig, Path(tmp)))
    result = common.stamped(a, result, (machine, arguments), "bench.serving", argv, figures)
    return write_report(result, out)


def write_report(result: Mapping[str, Any], out: Path) -> int:
    return common.write_page(out, "serving.md", render(result))


if __name__ == "__main__":
    sys.exit(main())
