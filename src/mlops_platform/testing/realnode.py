"""Pods that really run, on the local cluster's real node (``dev up --real-nodes``), for tests.

:func:`pod` builds a Pod of the locally built Python image (:data:`images.PYTHON`) that tolerates the
real node's taint and selects it; :func:`wait_pod` waits for a state of it and, on a timeout, says
what the pod's status was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlops_platform.devcluster.realnode import configs, images
from mlops_platform.runtime.transport import client as rclient
from mlops_platform.runtime.transport import resources
from mlops_platform.runtime.wait import until

IMAGE = images.PYTHON.ref
PLACEMENT = configs.PLACEMENT
#: a tiny HTTP server on :8080 answering every GET with "<pod name> <path>"
SERVER = """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{os.environ.get('HOSTNAME')} {self.path}".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
print("serving on 8080", flush=True)
http.server.ThreadingHTTPServer(("", 8080), H).serve_forever()
"""
#: ``python3 -c FETCH URL [TIMEOUT [BODY]]``: print the body of a GET (a POST of the JSON ``BODY``),
#: or the error (exit 1)
FETCH = """
import sys, urllib.request
timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 5
data = sys.argv[3].encode() if len(sys.argv) > 3 else None
req = urllib.request.Request(sys.argv[1], data=data, headers={"Content-Type": "application/json"})
try:
    print(urllib.request.urlopen(req, timeout=timeout).read().decode())
except Exception as e:
    print(f"error: {e}"); sys.exit(1)
"""


def pod(
    name: str,
    command: list[str],
    *,
    labels: dict[str, str] | None = None,
    http_ready: bool = False,
    limits: dict[str, str] | None = None,
    image: str = IMAGE,
    pull_policy: str = "IfNotPresent",
    restart_policy: str = "Always",
) -> dict[str, Any]:
    """A Pod for the real node; ``http_ready``: a readiness probe on :8080 (the :data:`SERVER`)."""
    container: dict[str, Any] = {
        "name": "main",
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": command,
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": limits or {"memory": "128Mi"}},
    }
    if http_ready:
        container["ports"] = [{"containerPort": 8080, "name": "http"}]
        container["readinessProbe"] = {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 1}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {
            **PLACEMENT,
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": 1,
            "containers": [container],
        },
    }


def server(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return pod(name, ["python3", "-c", SERVER], labels=labels, http_ready=True)


def container_status(p: dict[str, Any]) -> dict[str, Any]:
    statuses = (p.get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


def is_ready(p: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (p.get("status") or {}).get("conditions") or []
    )


async def wait_pod(
    c: rclient.Client,
    namespace: str,
    name: str,
    ok: Callable[[dict[str, Any]], bool],
    *,
    what: str,
    timeout: float = 90.0,
    interval: float = 0.5,
) -> dict[str, Any]:
    """The pod once ``ok(pod)``; a timeout names ``what`` and the pod's last status."""
    last: dict[str, Any] = {}

    async def probe() -> dict[str, Any] | None:
        nonlocal last
        last = await c.get(resources.POD, name, namespace)
        return last if ok(last) else None

    try:
        return await until(probe, timeout=timeout, interval=interval, what=f"pod {name}: {what}")
    except TimeoutError as e:
        raise TimeoutError(f"{e}; its status: {last.get('status')}") from None


async def exec_fetch(
    kubectl: Callable[..., Any],
    namespace: str,
    pod_name: str,
    url: str,
    timeout: float = 5,
    body: str | None = None,
) -> tuple[int, str]:
    """GET ``url`` (POST the JSON ``body``) from inside ``pod_name`` (``kubectl exec``); (exit code,
    what it printed)."""
    post = [body] if body is not None else []
    rc, out, err = await kubectl(
        "exec", "-n", namespace, pod_name, "--", "python3", "-c", FETCH, url, str(timeout), *post
    )
    return rc, (out + err).strip()


async def run_once(
    c: rclient.Client, kubectl: Callable[..., Any], namespace: str, manifest: dict[str, Any]
) -> tuple[str, str]:
    """Create a pod whose ``restartPolicy`` is ``Never`` and wait until it ends; (its phase, its log)."""
    await c.create(resources.POD, manifest, namespace)
    name = manifest["metadata"]["name"]
    done = await wait_pod(
        c,
        namespace,
        name,
        lambda p: (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
        what="ended",
    )
    rc, out, err = await kubectl("logs", "-n", namespace, name)
    if rc != 0:
        raise RuntimeError(f"kubectl logs {name}: {err}")
    return done["status"]["phase"], out


async def eventually_reaches(
    kubectl: Callable[..., Any],
    namespace: str,
    pod_name: str,
    url: str,
    reach: bool,
    what: str,
    *,
    body: str | None = None,
    expect: str = "",
) -> str:
    """Policies take effect within a sync of the agent: wait until ``pod_name`` reaches ``url`` (its
    answer holds ``expect``) or not, as ``reach`` says, three probes in a row; the last output."""
    last = ""

    async def settled() -> bool:
        nonlocal last
        for _ in range(3):
            rc, last = await exec_fetch(kubectl, namespace, pod_name, url, timeout=2, body=body)
            if (rc == 0 and expect in last) != reach:
                return False
        return True

    try:
        await until(settled, timeout=60, interval=0.5, what=what)
    except TimeoutError as e:
        raise TimeoutError(f"{e}; last answer: {last}") from None
    return last
