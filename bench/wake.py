"""Wake from zero through the activator (``make bench-wake``, issue #41).

On a local cluster with KEDA and the monitoring stack (``dev up --keda``), the model store, the
activator (``deploy.activator``, the operator's image) and the operator (``mlops-platform run`` with
the local cluster's flags and ``--activator``):

1. **cold wakes**: one InferenceService (the iris model of the e2e tests, ``minReplicas: 0``,
   ``maxReplicas: 1``, ``cooldownSeconds`` ``--cooldown``), ``--wakes`` times: wait until it is at
   zero and parked behind the activator, then send ``--burst`` requests at once the way ``mlops-platform
   infer`` does (through the activator's Service, the parked Service's Host) and time each answer.
   Where the time goes, from the first request on: KEDA's scale-up (the Deployment's
   ``spec.replicas`` 0 -> 1, polled every 0.1 s), the pod's own status times (scheduled, the
   initializer's start and end, the server's start, Ready: to the second), the first answer. The
   activator's own count says how many requests it held;
2. **warm**: ``--warm`` requests one after another once the Service is unparked, through the API
   server's service proxy of the Service itself: requests/s, and the activator's forwarded count
   before and after (it must not change: the activator is not in the path of a warm model).

Results: ``docs/benchmarks/wake.md`` (``--out``); ``--json FILE`` also writes every run.

    .venv/bin/python -m bench.wake                      # its own cluster mlops-bench-wake
    .venv/bin/python -m bench.wake --name mlops-dev     # an existing cluster (KEDA installed), kept
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import _common as common
from bench import serving

if TYPE_CHECKING:
    from mlops_platform.runtime.transport.client import Client

REPO = Path(__file__).resolve().parents[1]
CLUSTER = "mlops-bench-wake"
NAMESPACE = "bench-wake"
NAME = "sleepy"
SERVICE = f"{NAME}-predictor"
ACTIVATOR_NS = "mlops-activator"


def isvc(cooldown: int) -> dict[str, Any]:
    from mlops_platform.testing import serving as testing_serving

    obj = testing_serving.iris(NAME)
    obj["spec"]["predictor"]["autoscaling"] = {
        "minReplicas": 0, "maxReplicas": 1, "scaleToZero": {"cooldownSeconds": cooldown},
    }  # fmt: skip
    return obj


async def _parked(c: Client) -> bool:
    """At zero replicas and parked behind the activator."""
    from mlops_platform.runtime.transport import resources
    from mlops_platform.testing import activation

    dep = await c.get(resources.DEPLOYMENT, SERVICE, NAMESPACE)
    return dep["spec"].get("replicas") == 0 and await activation.parked(c, NAMESPACE, SERVICE)


async def one_wake(c: Client, burst: int) -> dict[str, Any]:
    """Requests to the parked service at once; when each was answered, KEDA's scale-up, the pod's times."""
    from mlops_platform import infer
    from mlops_platform.runtime.transport import resources
    from mlops_platform.testing import activation
    from mlops_platform.testing import serving as testing_serving

    before = await activation.counts(c)
    t0 = time.time()
    scaled: list[float] = []

    async def watch_scale() -> None:
        while not scaled:
            dep = await c.get(resources.DEPLOYMENT, SERVICE, NAMESPACE)
            if dep["spec"].get("replicas", 0) >= 1:
                scaled.append(time.time())
            await asyncio.sleep(0.1)

    async def request() -> float:
        answer = await infer.infer(c, NAME, NAMESPACE, serving.BODY, timeout=300)
        assert testing_serving.answer(answer) == serving.EXPECTED, answer
        return time.time() - t0

    watcher = asyncio.create_task(watch_scale())
    answered = await asyncio.gather(*(request() for _ in range(burst)))
    watcher.cancel()
    pods = (await c.list(resources.POD, NAMESPACE, label_selector=f"mlops.platform/inferenceservice={NAME}"))[
        "items"
    ]
    times = serving.status_times(max(pods, key=lambda p: p["metadata"]["creationTimestamp"])) if pods else {}
    after = await activation.counts(c)
    return {
        "answered": sorted(answered),
        "keda_scaled": scaled[0] - t0 if scaled else None,
        "pod": {k: v - t0 for k, v in times.items()},
        "held_forwarded": after.get("forwarded", 0) - before.get("forwarded", 0),
    }


async def warm(c: Client, n: int) -> dict[str, Any]:
    from mlops_platform import infer
    from mlops_platform.runtime import wait
    from mlops_platform.testing import activation

    await wait.until(lambda: activation.unparked(c, NAMESPACE, SERVICE), timeout=120, what="unparked")
    before = await activation.counts(c)
    started = time.monotonic()
    for _ in range(n):
        await infer.infer(c, NAME, NAMESPACE, serving.BODY)
    seconds = time.monotonic() - started
    after = await activation.counts(c)
    return {
        "requests": n,
        "per_second": n / seconds,
        "through_activator": after.get("forwarded", 0) - before.get("forwarded", 0),
    }


async def measure(a: argparse.Namespace, kubeconfig: str, log_dir: Path) -> dict[str, Any]:
    from mlops_platform import api
    from mlops_platform.runtime import wait
    from mlops_platform.runtime.transport import client as rclient
    from mlops_platform.runtime.transport import resources
    from mlops_platform.testing import activation

    async with (
        rclient.Client.from_kubeconfig(kubeconfig) as c,
        activation.installed(c, a.name) as activator,
    ):
        await serving.prepare_namespace(c, NAMESPACE)
        op = serving.start_operator(kubeconfig, log_dir, "--activator", activator)
        try:
            await serving.operator_started(op)
            await c.apply(
                api.RESOURCE,
                {**isvc(a.cooldown), "metadata": {"name": NAME, "namespace": NAMESPACE}},
                field_manager="bench-wake",
            )
            wakes, warms = [], []
            for i in range(a.wakes):
                await wait.until(
                    lambda: _parked(c), timeout=a.cooldown + 300, interval=0.5, what="parked at zero"
                )
                common.log(f"wake {i + 1}/{a.wakes}")
                wakes.append(await one_wake(c, a.burst))
                warms.append(await warm(c, a.warm))
        finally:
            serving.stop_operator(op)
            await c.delete(api.RESOURCE, NAME, NAMESPACE)
            await c.delete(resources.NAMESPACE, NAMESPACE)
    return {"wakes": wakes, "warm": warms}


def figures(r: Mapping[str, Any]) -> dict[str, Any]:
    firsts = [w["answered"][0] for w in r["wakes"]]
    lasts = [w["answered"][-1] for w in r["wakes"]]
    return {
        "first_answer_p50": common.percentile(firsts, 50),
        "first_answer_p95": common.percentile(firsts, 95),
        "last_answer_p95": common.percentile(lasts, 95),
        "warm_per_second": common.percentile([w["per_second"] for w in r["warm"]], 50),
        "warm_through_activator": sum(w["through_activator"] for w in r["warm"]),
    }


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def render(r: Mapping[str, Any]) -> str:
    f = figures(r)
    rows = []
    for i, w in enumerate(r["wakes"], 1):
        pod = w["pod"]
        rows.append(
            [str(i), _s(w["keda_scaled"]), _s(pod.get("created")), _s(pod.get("scheduled")),
             _s(pod.get("init_finished")), _s(pod.get("server_started")), _s(pod.get("ready")),
             _s(w["answered"][0]), _s(w["answered"][-1]), f"{w['held_forwarded']:.0f}"]
        )  # fmt: skip
    header = ["wake", "KEDA 0->1", "pod", "scheduled", "model fetched", "server started", "Ready"]
    header += ["first answer", "last answer", "held and forwarded"]
    warm_rows = [
        [str(i), f"{w['per_second']:.1f}", f"{w['through_activator']:.0f}"]
        for i, w in enumerate(r["warm"], 1)
    ]
    a = r["arguments"]
    first = f"p50 **{f['first_answer_p50']:.1f} s**, p95 **{f['first_answer_p95']:.1f} s**"
    lines = [
        "# Wake from zero through the activator",
        "",
        f"`{r['command']}` on {r['machine'].get('cpus', '?')} CPUs: {a['wakes']} cold wakes of the iris "
        f"model (MLServer), {a['burst']} requests at once at zero each time; cooldown {a['cooldown']} s.",
        "",
        f"- first answer after the requests: {first}; the last of a burst p95 {f['last_answer_p95']:.1f} s",
        f"- warm (unparked), through the Service itself: {f['warm_per_second']:.1f} requests/s one after "
        f"another; requests that went through the activator: {f['warm_through_activator']:.0f}",
        "",
        "Where the time goes (seconds from the requests; the pod's times are its status's, to the second):",
        "",
        common.markdown_table(header, rows),
        "",
        "Warm rounds:",
        "",
        common.markdown_table(["round", "requests/s", "through the activator"], warm_rows),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--name", default=None, help=f"an existing local cluster with KEDA (kept); default: {CLUSTER}"
    )
    p.add_argument("--wakes", type=int, default=5)
    p.add_argument("--burst", type=int, default=10, help="requests sent at once to the model at zero")
    p.add_argument("--warm", type=int, default=100, help="sequential requests once warm")
    p.add_argument("--cooldown", type=int, default=30)
    p.add_argument("--keep-cluster", action="store_true")
    p.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    p.add_argument("--json", help="also write every run to this file")
    a = p.parse_args(argv)
    out, machine, arguments = common.results_dir(a, REPO)
    from mlops_platform.devcluster import keda
    from mlops_platform.devcluster.modelstore import install as modelstore

    with common.cluster_for(a.name, CLUSTER, keep=a.keep_cluster) as (a.name, kubeconfig):
        keda.install(a.name)
        modelstore.install(a.name)
        with tempfile.TemporaryDirectory(prefix="bench-wake-") as tmp:
            result = asyncio.run(measure(a, kubeconfig, Path(tmp)))
    result = common.stamped(a, result, (machine, arguments), "bench.wake", argv, figures)
    return common.write_page(out, "wake.md", render(result))


if __name__ == "__main__":
    sys.exit(main())
