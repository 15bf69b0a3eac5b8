"""Find the pinned control-plane binaries, building them from Go modules when missing.

Resolution order for each binary (envtest convention first):

1. ``$KUBEBUILDER_ASSETS/<name>`` when it reports the pinned version;
2. ``<name>`` on ``PATH`` when it reports the pinned version;
3. the per-version build cache that ``hack/build-control-plane`` fills (built on demand).

metrics-server (kwokctl runs it: the resource metrics API) has its own per-version cache directory,
and so does :func:`promtool` (for the alert rule tests, ``PATH`` first), so pinning another
metrics-server or Prometheus never rebuilds Kubernetes. So do the object-store servers of the
storage initializer's tests, minio and fake-gcs-server (:func:`object_store_server`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path

METRICS_SERVER = "metrics-server"
NAMES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "kwokctl",
    METRICS_SERVER,
)


def versions() -> dict[str, str]:
    """The pinned versions from ``versions.env`` (KUBE_VERSION, ETCD_VERSION, KWOK_VERSION, ...)."""
    text = resources.files("mlops_platform.devcluster").joinpath("versions.env").read_text()
    return dict(
        line.split("=", 1)
        for line in (raw.strip() for raw in text.splitlines())
        if line and not line.startswith("#")
    )


def expected_version(name: str) -> str:
    v = versions()
    if name == "promtool":
        return v["PROMTOOL_VERSION"]
    if name == "etcd":
        return v["ETCD_VERSION"]
    if name in ("kwok", "kwokctl"):
        return v["KWOK_VERSION"]
    if name == METRICS_SERVER:
        return v["METRICS_SERVER_VERSION"]
    return v["KUBE_VERSION"]


def cache_root() -> Path:
    env = os.environ.get("MLOPS_PLATFORM_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "mlops-platform"


def cache_bin_dir() -> Path:
    v = versions()
    return cache_root() / "bin" / f"k8s-{v['KUBE_VERSION']}_etcd-{v['ETCD_VERSION']}_kwok-{v['KWOK_VERSION']}"


def metrics_server_cache_dir() -> Path:
    """Where ``hack/build-control-plane`` puts metrics-server: ``<cache>/bin/metrics-server-<version>``."""
    return cache_root() / "bin" / f"metrics-server-{versions()['METRICS_SERVER_VERSION']}"


def _cache_dir(name: str) -> Path:
    return metrics_server_cache_dir() if name == METRICS_SERVER else cache_bin_dir()


def repo_root() -> Path | None:
    """The source checkout this package runs from (editable install), if any."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "hack" / "build-control-plane").is_file():
            return parent
    return None


_VERSION_ARGS = {
    "kubectl": ["version", "--client"],
    "kwokctl": ["--version"],
    "kwok": ["--version"],
}


def reported_version(path: Path) -> str | None:
    """What ``path --version`` says (the first vX.Y.Z in it), or None when it does not run."""
    args = _VERSION_ARGS.get(path.name, ["--version"])
    try:
        out = subprocess.run(
            [str(path), *args], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"v?(\d+\.\d+\.\d+)", out)
    return f"v{match.group(1)}" if match else None


@dataclasses.dataclass(frozen=True)
class Binaries:
    """Absolute paths of the control-plane binaries, all of the pinned versions."""

    paths: dict[str, Path]

    def __getitem__(self, name: str) -> Path:
        return self.paths[name]

    @property
    def path_dirs(self) -> list[str]:
        """Directories to put first on PATH so kwokctl finds our kubectl, not another one."""
        return sorted({str(p.parent) for p in self.paths.values()})


def _candidates(name: str) -> list[Path]:
    found: list[Path] = []
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        found.append(Path(assets) / name)
    on_path = shutil.which(name)
    if on_path:
        found.append(Path(on_path))
    return found


def find(build: bool = True, names: Iterable[str] = NAMES) -> Binaries:
    """Resolve ``names`` (default: every binary); build the missing ones with
    ``hack/build-control-plane`` if allowed."""
    paths: dict[str, Path] = {}
    missing: list[str] = []
    for name in names:
        cache = _cache_dir(name)
        want = expected_version(name)
        chosen = next(
            (c for c in _candidates(name) if c.is_file() and reported_version(c) == want),
            None,
        )
        if chosen is None and (cache / name).is_file():
            chosen = cache / name
        if chosen is None:
            missing.append(name)
        else:
            paths[name] = chosen.resolve()
    if missing:
        if not build:
            raise FileNotFoundError(
                f"control-plane binaries missing: {', '.join(missing)} (run `make binaries`)"
            )
        root = repo_root()
        if root is None:
            raise FileNotFoundError(
                f"control-plane binaries missing: {', '.join(missing)}; set KUBEBUILDER_ASSETS to a "
                "directory holding them, or run hack/build-control-plane from a source checkout"
            )
        subprocess.run([str(root / "hack" / "build-control-plane")], check=True)
        for name in missing:
            paths[name] = _cache_dir(name) / name
    return Binaries(paths)


def promtool_cache_dir() -> Path:
    """Where ``hack/build-control-plane`` puts promtool: ``<cache>/bin/promtool-<version>``."""
    return cache_root() / "bin" / f"promtool-{versions()['PROMTOOL_VERSION']}"


def promtool(build: bool = True) -> Path:
    """The pinned promtool: on ``PATH`` if it reports ``PROMTOOL_VERSION``, else from the cache,
    else built there (``hack/build-control-plane --promtool-only``, minutes when cold) if allowed.

    Raises ``FileNotFoundError`` saying how to get it when none is found and none can be built.
    """
    want = expected_version("promtool")
    on_path = shutil.which("promtool")
    if on_path and reported_version(Path(on_path)) == want:
        return Path(on_path).resolve()
    cached = promtool_cache_dir() / "promtool"
    not_found = (
        f"promtool {want} not found: not on PATH (at that version) nor in {cached.parent}; "
        f"put promtool {want} on PATH or "
    )
    return _cached_or_built(cached, "--promtool-only", build, not_found)


def _cached_or_built(cached: Path, flag: str, build: bool, not_found: str) -> Path:
    """``cached`` if it is there, else built by ``hack/build-control-plane <flag>`` if ``build`` (in a
    source checkout); else ``FileNotFoundError``: ``not_found``, then how to get it."""
    if cached.is_file():
        return cached
    root = repo_root()
    if not build or root is None:
        how = f"run `hack/build-control-plane {flag}`" if root else "use a source checkout"
        raise FileNotFoundError(f"{not_found}{how}")
    subprocess.run([str(root / "hack" / "build-control-plane"), flag], check=True)
    if not cached.is_file():
        raise FileNotFoundError(f"hack/build-control-plane {flag} did not produce {cached}")
    return cached


# The object-store servers of the storage initializer's tests -> their versions.env key.
OBJECT_STORE_SERVERS = {"minio": "MINIO_VERSION", "fake-gcs-server": "FAKE_GCS_SERVER_VERSION"}


def object_store_server_cache_dir(name: str) -> Path:
    """Where ``hack/build-control-plane`` puts ``name`` (``minio`` or ``fake-gcs-server``):
    ``<cache>/bin/<name>-<version>``."""
    return cache_root() / "bin" / f"{name}-{versions()[OBJECT_STORE_SERVERS[name]]}"


def object_store_server(name: str, build: bool = True) -> Path:
    """The pinned ``minio`` or ``fake-gcs-server`` from the cache, else built there
    (``hack/build-control-plane --object-stores-only``, minutes when cold) if allowed.

    Only the cache counts (neither reports the pinned version: MinIO's is a commit time,
    fake-gcs-server has no ``--version``). Raises ``FileNotFoundError`` saying how to get it."""
    cached = object_store_server_cache_dir(name) / name
    return _cached_or_built(cached, "--object-stores-only", build, f"{name} not found in {cached.parent}: ")


# The real worker node's tools (devcluster.realnode) -> their versions.env key; kubelet and kube-proxy
# are in the control plane's directory (the same k8s.io/kubernetes).
NODE_TOOLS = {
    "containerd": "CONTAINERD_VERSION",
    "cni-plugins": "CNI_PLUGINS_VERSION",
    "kube-router": "KUBE_ROUTER_VERSION",
    "coredns": "COREDNS_VERSION",
    # the local cluster's Gateway API implementation (devcluster.gateway): an image run on the node
    # on demand, so not among _NODE_FILES (a node starts without it); :func:`traefik` builds it
    "traefik": "TRAEFIK_VERSION",
}
_NODE_FILES = {
    "containerd": ("containerd", "containerd-shim-runc-v2", "ctr"),
    "cni-plugins": ("bridge", "host-local", "loopback", "portmap"),
    "kube-router": ("kube-router",),
    "coredns": ("coredns",),
}


def node_tool_dir(tool: str) -> Path:
    """Where ``hack/build-control-plane`` puts a node tool: ``<cache>/bin/<tool>-<version>``."""
    return cache_root() / "bin" / f"{tool}-{versions()[NODE_TOOLS[tool]]}"


def node_tools(build: bool = True) -> dict[str, Path]:
    """The real node's tool directories and kubelet/kube-proxy, built (``hack/build-control-plane
    --node-only``, minutes when cold) when missing and allowed."""

    def missing() -> list[Path]:
        files = [node_tool_dir(t) / f for t, fs in _NODE_FILES.items() for f in fs]
        files += [cache_bin_dir() / "kubelet", cache_bin_dir() / "kube-proxy"]
        return [f for f in files if not f.is_file()]

    _ensure("real node binaries", missing, build, "build-control-plane", "--node-only")
    found = {t: node_tool_dir(t) for t in NODE_TOOLS}
    return found | {"kubelet": cache_bin_dir() / "kubelet", "kube-proxy": cache_bin_dir() / "kube-proxy"}


def traefik(build: bool = True) -> Path:
    """The pinned Traefik from the cache (``node_tool_dir("traefik")``), else built there
    (``hack/build-control-plane --traefik-only``, many minutes when cold) if allowed.

    Only the cache counts. Raises ``FileNotFoundError`` saying how to get it."""
    cached = node_tool_dir("traefik") / "traefik"
    return _cached_or_built(cached, "--traefik-only", build, f"traefik not found in {cached.parent}: ")


def helm(build: bool = True) -> Path:
    """The pinned Helm (``<cache>/bin/helm-<version>/helm``), else built there (``hack/build-control-plane
    --helm-only``, minutes when cold) if allowed. Only the cache counts. Raises ``FileNotFoundError``
    saying how to get it."""
    cached = cache_root() / "bin" / f"helm-{versions()['HELM_VERSION']}" / "helm"
    return _cached_or_built(cached, "--helm-only", build, f"helm not found in {cached.parent}: ")


# The local cluster's monitoring stack (devcluster.monitoring) -> the versions.env key of its cache
# directory (Prometheus is the pinned promtool's release) and the binaries ``hack/build-monitoring``
# puts there.
MONITORING_TOOLS = {
    "prometheus": "PROMTOOL_VERSION",
    "prometheus-operator": "PROMETHEUS_OPERATOR_VERSION",
    "kube-state-metrics": "KUBE_STATE_METRICS_VERSION",
    "keda": "KEDA_VERSION",
}
_MONITORING_FILES = {
    "prometheus": ("prometheus",),
    "prometheus-operator": ("operator", "prometheus-config-reloader"),
    "kube-state-metrics": ("kube-state-metrics",),
    "keda": ("operator", "adapter"),
}


def monitoring_tool_dir(tool: str) -> Path:
    """Where ``hack/build-monitoring`` puts a monitoring tool: ``<cache>/bin/<tool>-<version>``."""
    return cache_root() / "bin" / f"{tool}-{versions()[MONITORING_TOOLS[tool]]}"


def monitoring(build: bool = True) -> dict[str, Path]:
    """The monitoring stack's cache directories, built (``hack/build-monitoring``, minutes when cold)
    when a binary is missing and allowed. Only the cache counts. Raises ``FileNotFoundError`` saying
    how to get them."""

    def missing() -> list[Path]:
        files = [monitoring_tool_dir(t) / f for t, fs in _MONITORING_FILES.items() for f in fs]
        return [f for f in files if not f.is_file()]

    _ensure("monitoring binaries", missing, build, "build-monitoring")
    return {t: monitoring_tool_dir(t) for t in MONITORING_TOOLS}


def _ensure(what: str, missing: Callable[[], list[Path]], build: bool, script: str, *flags: str) -> None:
    """Nothing when ``missing()`` lists no file; else ``hack/<script> <flags>`` builds them when
    ``build`` (in a source checkout), or ``FileNotFoundError`` names them and how to get them."""
    if not missing():
        return
    root = repo_root()
    command = " ".join([f"hack/{script}", *flags])
    if not build or root is None:
        how = f"run `{command}`" if root else "use a source checkout"
        raise FileNotFoundError(f"{what} missing: {', '.join(map(str, missing()))}: {how}")
    subprocess.run([str(root / "hack" / script), *flags], check=True)
    if missing():
        raise FileNotFoundError(f"{command} did not produce {missing()}")
