"""``mlops-platform dev``: the local control plane; ``mlops-platform demo`` on it."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys

import click


@click.group()
def dev() -> None:
    """The local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok nodes)."""


cluster_name = click.option("--name", default="mlops-dev", help="cluster name")


@dev.command()
@cluster_name
@click.option(
    "--without-crds", is_flag=True, help="leave the third-party CRDs out (optional-CRD-absent tests)"
)
@click.option("--wait", default=180.0, help="seconds to wait for readiness")
@click.option(
    "--nodes",
    "cpu_nodes",
    type=click.IntRange(min=1),
    default=3,
    help="fake CPU nodes, 250 pods each (besides the 2 GPU nodes); added to a running cluster too",
)
@click.option(
    "--real-nodes",
    type=click.IntRange(min=0, max=10),
    default=1,
    help="real worker nodes (kubelet, containerd, kube-proxy in namespaces of their own; tainted: only "
    "pods that tolerate mlops.platform/real-node run there); added to a running cluster too; 0 for "
    "scale benchmarks",
)
@click.option(
    "--unthrottled",
    is_flag=True,
    help="no client QPS limits in controller-manager and scheduler, no in-flight limits in the API "
    "server (scale benchmarks; applies when the cluster is created)",
)
@click.option(
    "--without-metrics-server",
    is_flag=True,
    help="no metrics-server (no metrics API: kubectl top and HPAs fail) and upstream's HPA timing "
    "(15 s sync, 5 min downscale stabilization); applies when the cluster is created",
)
@click.option(
    "--monitoring",
    is_flag=True,
    help="the monitoring stack on the real node too: the Prometheus Operator, Prometheus and "
    "kube-state-metrics (built from pinned modules when the cache lacks them); added to a running "
    "cluster too",
)
@click.option(
    "--keda",
    is_flag=True,
    help="KEDA's operator and metrics API server on the real node too (with the monitoring stack its "
    "triggers query); added to a running cluster too",
)
def up(
    name: str,
    without_crds: bool,
    wait: float,
    cpu_nodes: int,
    real_nodes: int,
    unthrottled: bool,
    without_metrics_server: bool,
    monitoring: bool,
    keda: bool,
) -> None:
    """Start the local cluster (idempotent) and print its kubeconfig path."""
    from mlops_platform.devcluster import cluster
    from mlops_platform.devcluster import keda as keda_stack
    from mlops_platform.devcluster import monitoring as monitoring_stack

    if (monitoring or keda) and real_nodes < 1:
        raise click.BadParameter(
            "the monitoring stack and KEDA run on a real node", param_hint="--real-nodes"
        )
    kubeconfig = cluster.up(
        name,
        install_crds=not without_crds,
        wait=wait,
        cpu_nodes=cpu_nodes,
        real_nodes=real_nodes,
        unthrottled=unthrottled,
        metrics_server=not without_metrics_server,
    )
    if keda:
        keda_stack.install(name)  # with the monitoring stack
    elif monitoring:
        monitoring_stack.install(name)
    click.echo(kubeconfig)


def _fraction(value: str | None) -> float | None:
    """``90%``, ``90`` -> 0.9 (of the request)."""
    if value is None:
        return None
    try:
        return float(value.strip().removesuffix("%")) / 100
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a percentage (e.g. 90%)") from None


@dev.command()
@cluster_name
@click.argument("inferenceservice")
@click.option("-n", "--namespace", default="default")
@click.option("--cpu", help="CPU use of each pod, in % of its CPU request (e.g. 150%)")
@click.option("--memory", help="memory use of each pod, in % of its memory request")
@click.option("--clear", is_flag=True, help="back to idle (1m CPU, 1Mi memory)")
def load(
    name: str, inferenceservice: str, namespace: str, cpu: str | None, memory: str | None, clear: bool
) -> None:
    """Simulate the CPU/memory use of an InferenceService's pods (kwok resource usage): what
    metrics-server, `kubectl top` and the HPA see. Prints the simulated loads of the cluster."""
    from mlops_platform.devcluster import cluster, usage
    from mlops_platform.runtime.transport import client as rclient

    if clear == (cpu is not None or memory is not None):
        raise click.UsageError("give --cpu and/or --memory, or --clear")
    row = usage.for_inferenceservice(
        namespace, inferenceservice, cpu=_fraction(cpu), memory=_fraction(memory)
    )

    async def run() -> list[usage.Load]:
        async with rclient.Client.from_kubeconfig(cluster.kubeconfig_path(name)) as c:
            return await (usage.clear_load(c, row) if clear else usage.set_load(c, row))

    for r in asyncio.run(run()):
        parts = [f"{k} {v:.0%}" for k, v in (("cpu", r.cpu), ("memory", r.memory)) if v is not None]
        selector = ",".join(f"{k}={v}" for k, v in r.selector)
        click.echo(f"{r.namespace}\t{selector}\t{', '.join(parts)} of request")


@dev.command(name="import-image")
@cluster_name
@click.argument("images", nargs=-1, required=True)
def import_image(name: str, images: tuple[str, ...]) -> None:
    """Build (or take from the cache) local images and import them into every real node, e.g.
    `dev import-image mlserver`; `NAME:TAG` imports it under that tag too (`mlops-platform:0.1.1`: a
    new tag to upgrade to). Prints each image's reference (use it with imagePullPolicy
    IfNotPresent)."""
    from mlops_platform.devcluster import cluster

    try:
        refs = cluster.import_images(name, list(images))
    except (ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    for ref in refs:
        click.echo(ref)


@dev.command(name="build-images")
@click.argument("images", nargs=-1, required=True)
def build_images(images: tuple[str, ...]) -> None:
    """Build (or find cached) local images without a cluster, e.g. `dev build-images mlserver`
    (`make demo` builds the Python ones while the Go builds run). Prints each archive's path."""
    from mlops_platform.devcluster.realnode import imagebuild
    from mlops_platform.devcluster.realnode import images as local_images

    try:
        recipes = local_images.by_name(list(images))
        paths = [imagebuild.archive(r) for r in recipes]
    except (ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from None
    for path in paths:
        click.echo(path)


@dev.command(name="model-store")
@cluster_name
@click.option(
    "--grant", "namespaces", multiple=True, help="a namespace that gets the store's Secret (repeatable)"
)
def model_store(name: str, namespaces: tuple[str, ...]) -> None:
    """Run the model store (MinIO on the real node, in mlops-models) with the demo models trained
    and uploaded: s3://models/iris/1, iris/2, xgboost-iris/1, broken/1. Idempotent. With --grant,
    those namespaces get the Secret `model-store` that storage.secretName names."""
    from mlops_platform.devcluster import cluster
    from mlops_platform.devcluster.modelstore import install, manifests

    try:
        install.install(name)
    except (ValueError, RuntimeError, TimeoutError) as e:
        raise click.ClickException(str(e)) from None
    if namespaces:
        asyncio.run(install.grant_all(cluster.kubeconfig_path(name), list(namespaces)))
    click.echo(f"endpoint {manifests.ENDPOINT}  bucket {manifests.BUCKET}  secret {manifests.CLIENT_SECRET}")


@dev.command()
@cluster_name
def down(name: str) -> None:
    """Stop and delete the local cluster; no process is left behind."""
    from mlops_platform.devcluster import cluster

    cluster.down(name)


@dev.command()
@cluster_name
def status(name: str) -> None:
    """Print the cluster's state as JSON (exit 1 when its API server is not ready)."""
    from mlops_platform.devcluster import cluster

    st = cluster.status(name)
    click.echo(json.dumps(st, indent=2))
    sys.exit(0 if st["apiserver_ready"] else 1)


@dev.command()
@cluster_name
def kubeconfig(name: str) -> None:
    """Print the kubeconfig path (export KUBECONFIG=$(mlops-platform dev kubeconfig))."""
    from mlops_platform.devcluster import cluster

    if not cluster.exists(name):
        raise click.ClickException(
            f"cluster {name!r} does not exist; run `mlops-platform dev up --name {name}`"
        )
    click.echo(cluster.kubeconfig_path(name))


@dev.command()
@cluster_name
def env(name: str) -> None:
    """Print the shell exports for the local cluster: its KUBECONFIG, and the pinned kubectl and helm
    first on PATH (eval "$(mlops-platform dev env)")."""
    from mlops_platform.devcluster import binaries, cluster

    if not cluster.exists(name):
        raise click.ClickException(
            f"cluster {name!r} does not exist; run `mlops-platform dev up --name {name}`"
        )
    try:
        tools = [binaries.find(build=False, names=("kubectl",))["kubectl"].parent, binaries.helm().parent]
    except FileNotFoundError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"export KUBECONFIG={shlex.quote(str(cluster.kubeconfig_path(name)))}")
    click.echo(f'export PATH={":".join(shlex.quote(str(t)) for t in tools)}:"$PATH"')


@dev.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@cluster_name
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def kubectl(name: str, args: tuple[str, ...]) -> None:
    """Run the pinned kubectl against the cluster."""
    from mlops_platform.devcluster import cluster

    sys.exit(cluster.kubectl(name, list(args)))


@dev.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@cluster_name
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def why(name: str, args: tuple[str, ...]) -> None:
    """`mlops-platform why ARGS` on the cluster, with its operator's flags (the local runtime table,
    the initializer's image): what `demo` runs, so "what the operator would change" compares with
    what that operator builds."""
    from mlops_platform.cli.why_command import why_command
    from mlops_platform.devcluster import cluster
    from mlops_platform.devcluster import demo as demo_mod

    local = ["--kubeconfig", str(cluster.kubeconfig_path(name)), *demo_mod.LOCAL_FLAGS]
    why_command.main([*args, *local], prog_name="mlops-platform dev why")


@dev.command(name="stop-operator")
@cluster_name
def stop_operator(name: str) -> None:
    """Stop the operator that `mlops-platform demo` started (SIGTERM, graceful)."""
    from mlops_platform.devcluster import demo as demo_mod

    demo_mod.stop_operator(name)


@click.command()
@cluster_name
@click.option("--timeout", default=180.0, help="seconds to wait for the samples")
def demo(name: str, timeout: float) -> None:
    """Local cluster + CRD + operator + config/samples, waited on until each reaches its state."""
    from mlops_platform.devcluster import demo as demo_mod

    demo_mod.run(name, timeout=timeout)


@dev.command()
def build() -> None:
    """Build (or find cached) control-plane binaries and print their paths."""
    from mlops_platform.devcluster import binaries

    for name, path in binaries.find().paths.items():
        click.echo(f"{name}\t{path}")
