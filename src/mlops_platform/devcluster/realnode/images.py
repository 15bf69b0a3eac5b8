"""The images a real node runs, as :class:`~.imagebuild.Recipe` s (built by :mod:`.imagebuild` on
this machine and imported into the node's containerd: no registry):

- :data:`PAUSE`: the pod sandbox, Kubernetes' own ``build/pause/linux/pause.c`` from the pinned
  ``k8s.io/kubernetes`` module, compiled statically;
- :data:`PYTHON`: Debian bookworm (minbase) with python3 and CA certificates: the base of the test
  workloads and of the images built on it;
- :data:`COREDNS`: the cluster DNS, the pinned CoreDNS binary (static) alone, as upstream's image;
- :data:`MINIO`: the local cluster's model store, the pinned MinIO binary (static) alone;
- :data:`TRAEFIK`: the local cluster's Gateway API implementation, the pinned Traefik binary (static)
  alone;
- :data:`MONITORING` and :data:`AUTOSCALING`: the local cluster's monitoring stack and KEDA, each
  pinned binary (static) alone: Prometheus, the Prometheus Operator, its config reloader,
  kube-state-metrics, KEDA's operator and its metrics API server;
- :data:`MLSERVER`: MLServer 1.7.1 with its scikit-learn and XGBoost runtimes, on :data:`PYTHON`,
  at the versions upstream's image of that release installs (``requirements/mlserver-1.7.1.txt``);
- :data:`OPERATOR`: the operator and storage initializer (this checkout).
"""

from __future__ import annotations

import re

from mlops_platform.devcluster import binaries
from mlops_platform.devcluster.realnode.imagebuild import DEBIAN_SUITE, VENV, Recipe

PAUSE = Recipe(
    "pause",
    "3.10",
    "the pod sandbox (Kubernetes' pause.c, static)",
    config=("--config.entrypoint=/pause", "--config.user=65535:65535"),
)
PYTHON = Recipe(
    "python",
    f"3.11-{DEBIAN_SUITE}",
    "Debian minbase with python3",
    config=(
        "--config.workingdir=/",
        "--config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--config.cmd=python3",
    ),
    debian_packages=("python3", "ca-certificates"),
)
COREDNS = Recipe(
    "coredns",
    binaries.versions()["COREDNS_VERSION"],
    "the cluster DNS (the pinned CoreDNS, static)",
    config=("--config.entrypoint=/coredns", "--config.exposedports=53/udp", "--config.exposedports=53/tcp"),
    tool="coredns",
)
MLSERVER = Recipe(
    "mlserver",
    "1.7.1",
    "MLServer 1.7.1 with its scikit-learn and XGBoost runtimes",
    config=(
        f"--config.env=PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--config.env=PYTHONUNBUFFERED=1",
        # as upstream's image: its working directory (where MLServer writes .metrics) is the user's
        "--config.workingdir=/opt/mlserver",
        "--config.user=1000",
        "--clear=config.cmd",
        "--config.cmd=mlserver",
        "--config.cmd=start",
        "--config.cmd=/mnt/models",
        "--config.exposedports=8080/tcp",
        "--config.exposedports=8081/tcp",
        "--config.exposedports=8082/tcp",
    ),
    base=PYTHON,
    requirements="mlserver-1.7.1.txt",
    owned_dirs=(("/opt/mlserver", 1000),),
)
#: the local cluster's model store (``devcluster.modelstore``): the pinned MinIO (static) alone
MINIO = Recipe(
    "minio",
    binaries.versions()["MINIO_VERSION"],
    "the model store (the pinned MinIO, static)",
    config=("--config.entrypoint=/minio", "--config.exposedports=9000/tcp", "--config.user=1000:1000"),
    tool="minio",
)
#: the local cluster's Gateway API implementation (``devcluster.gateway``): the pinned Traefik (static)
#: alone, imported on demand (never at a node's start)
TRAEFIK = Recipe(
    "traefik",
    binaries.versions()["TRAEFIK_VERSION"],
    "the Gateway API implementation (the pinned Traefik, static)",
    config=(
        "--config.entrypoint=/traefik",
        "--config.exposedports=8000/tcp",
        "--config.exposedports=8080/tcp",
        "--config.user=65532:65532",
    ),
    tool="traefik",
)
#: the operator and the storage initializer (the Dockerfile's recipe: a venv with the project's wheel
#: and its pinned dependencies, no pip, non-root)
OPERATOR = Recipe(
    "mlops-platform",
    "0.1.0",
    "the operator and storage initializer (this checkout)",
    config=(
        f"--config.env=PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--config.env=PYTHONUNBUFFERED=1",
        "--config.env=PYTHONDONTWRITEBYTECODE=1",
        "--config.env=HOME=/tmp",
        "--config.user=65532:65532",
        "--config.workingdir=/",
        "--clear=config.cmd",
        "--config.entrypoint=mlops-platform",
        "--config.entrypoint=run",
        "--config.exposedports=8080/tcp",
        "--config.exposedports=8081/tcp",
        "--config.label=org.opencontainers.image.title=mlops-platform",
        "--config.label=org.opencontainers.image.licenses=Apache-2.0",
    ),
    base=PYTHON,
    requirements="operator.txt",
    project=True,
)


def _stack(name: str, tool: str, description: str, port: int, path: str, binary: str = "") -> Recipe:
    """An image of the monitoring and autoscaling stack (``devcluster.monitoring``,
    ``devcluster.keda``): one pinned static binary alone, at the path upstream's image has it (what
    upstream's manifests run: the Prometheus Operator runs ``/bin/prometheus-config-reloader``, KEDA's
    manifests ``/keda`` and ``/keda-adapter``; Prometheus runs as its image's entrypoint), as nobody."""
    return Recipe(
        name,
        binaries.versions()[binaries.MONITORING_TOOLS[tool]],
        description,
        config=(
            f"--config.entrypoint={path}",
            f"--config.exposedports={port}/tcp",
            "--config.user=65534:65534",
        ),
        tool=tool,
        binary=binary,
        binary_path=path,
    )


PROMETHEUS = _stack(
    "prometheus", "prometheus", "Prometheus (the pinned promtool's release, static)", 9090, "/bin/prometheus"
)
PROMETHEUS_OPERATOR = _stack(
    "prometheus-operator",
    "prometheus-operator",
    "the Prometheus Operator (static)",
    8080,
    "/bin/operator",
    "operator",
)
CONFIG_RELOADER = _stack(
    "prometheus-config-reloader",
    "prometheus-operator",
    "the Prometheus Operator's config reloader (static)",
    8080,
    "/bin/prometheus-config-reloader",
    "prometheus-config-reloader",
)
KUBE_STATE_METRICS = _stack(
    "kube-state-metrics", "kube-state-metrics", "kube-state-metrics (static)", 8080, "/kube-state-metrics"
)
#: the monitoring stack, imported on demand (``dev up --monitoring``)
MONITORING = (PROMETHEUS, PROMETHEUS_OPERATOR, CONFIG_RELOADER, KUBE_STATE_METRICS)
KEDA = _stack("keda", "keda", "KEDA's operator (static)", 8080, "/keda", "operator")
KEDA_METRICS_APISERVER = _stack(
    "keda-metrics-apiserver", "keda", "KEDA's metrics API server (static)", 6443, "/keda-adapter", "adapter"
)
#: KEDA, imported on demand (``dev up --keda``)
AUTOSCALING = (KEDA, KEDA_METRICS_APISERVER)
ALL = (PAUSE, PYTHON, COREDNS, MLSERVER, MINIO, OPERATOR, TRAEFIK, *MONITORING, *AUTOSCALING)
#: what every real node imports when it starts; the others are imported when asked for
#: (:meth:`~mlops_platform.devcluster.realnode.fabric.Fabric.import_images`)
NODE = (PAUSE, PYTHON, COREDNS)


def by_name(names: list[str]) -> list[Recipe]:
    """The recipes named (``mlserver``...); a name that is none of :data:`ALL` is an error naming them."""
    known = {r.name: r for r in ALL}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"no local image {', '.join(unknown)}: the images are {', '.join(known)}")
    return [known[n] for n in names]


_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")


def parse_ref(name: str) -> tuple[str, str]:
    """``NAME[:TAG]`` -> (NAME, TAG or ""); a tag that is no OCI tag is an error naming it."""
    base, _, tag = name.partition(":")
    if ":" in name and not _TAG.fullmatch(tag):
        raise ValueError(
            f"{name!r}: the tag {tag!r} is not an image tag ([A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})"
        )
    return base, tag
