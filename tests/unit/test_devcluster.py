"""Unit checks of the local control plane's configuration (no cluster, no Go)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlops_platform.devcluster import binaries, cluster, clusterconfig, kwokctl, nodes
from mlops_platform.devcluster.realnode import fabric

ROOT = Path(__file__).resolve().parents[2]


def test_go_modules_pin_the_versions_in_versions_env() -> None:
    v = binaries.versions()
    k8s = (ROOT / "hack/k8s/go.mod").read_text()
    assert f"k8s.io/kubernetes {v['KUBE_VERSION']}" in k8s
    staging = re.findall(r"^\s+(k8s\.io/\S+) => (\S+) (\S+)$", k8s, re.M)
    assert staging, "every staging module must be replaced by its published version"
    minor_patch = "v0." + v["KUBE_VERSION"].removeprefix("v1.")
    assert all(src == dst and ver == minor_patch for src, dst, ver in staging), staging
    assert f"go.etcd.io/etcd/server/v3 {v['ETCD_VERSION']}" in (ROOT / "hack/etcd/go.mod").read_text()
    assert f"sigs.k8s.io/kwok {v['KWOK_VERSION']}" in (ROOT / "hack/kwok/go.mod").read_text()
    metrics_server = (ROOT / "hack/metrics-server/go.mod").read_text()
    pin = rf"^\s+sigs\.k8s\.io/metrics-server {v['METRICS_SERVER_VERSION']}\b"
    assert re.search(pin, metrics_server, re.M)
    assert "tool sigs.k8s.io/metrics-server/cmd/metrics-server" in metrics_server


def test_promtool_go_module_is_the_prometheus_release_in_versions_env() -> None:
    v = binaries.versions()
    go_mod = (ROOT / "hack/promtool/go.mod").read_text()
    assert re.search(
        rf"^require github\.com/prometheus/prometheus {v['PROMTOOL_MODULE_VERSION']}$", go_mod, re.M
    )
    # Prometheus tags its Go module v0.3MM.P for release v3.MM.P
    tag = re.fullmatch(r"v0\.3(\d\d)\.(\d+)", v["PROMTOOL_MODULE_VERSION"])
    assert tag, v["PROMTOOL_MODULE_VERSION"]
    assert v["PROMTOOL_VERSION"] == f"v3.{int(tag.group(1))}.{tag.group(2)}"
    assert "github.com/prometheus/prometheus/cmd/promtool" in (ROOT / "hack/promtool/tools.go").read_text()


def test_object_store_server_go_modules_pin_the_versions_in_versions_env() -> None:
    v = binaries.versions()
    for name, module, key in (
        ("minio", "github.com/minio/minio", "MINIO_VERSION"),
        ("fake-gcs-server", "github.com/fsouza/fake-gcs-server", "FAKE_GCS_SERVER_VERSION"),
    ):
        go_mod = (ROOT / "hack" / name / "go.mod").read_text()
        assert re.search(rf"^\s+{re.escape(module)} {re.escape(v[key])}\b", go_mod, re.M), name
        assert f"tool {module}\n" in go_mod, name
        assert binaries.OBJECT_STORE_SERVERS[name] == key
    # MinIO tags no Go module versions: a pseudo-version (hack/build-control-plane derives its
    # --version from the commit time and hash in it)
    assert re.fullmatch(r"v0\.0\.0-\d{14}-[0-9a-f]{12}", v["MINIO_VERSION"]), v["MINIO_VERSION"]


def test_traefik_go_module_pins_the_version_in_versions_env() -> None:
    v = binaries.versions()
    go_mod = (ROOT / "hack/traefik/go.mod").read_text()
    assert re.search(
        rf"^require github\.com/traefik/traefik/v3 {re.escape(v['TRAEFIK_VERSION'])}$", go_mod, re.M
    )
    assert '"github.com/traefik/traefik/v3/cmd/traefik"' in (ROOT / "hack/traefik/tools.go").read_text()
    assert binaries.NODE_TOOLS["traefik"] == "TRAEFIK_VERSION"
    assert binaries.node_tool_dir("traefik").name == f"traefik-{v['TRAEFIK_VERSION']}"


def test_helm_go_module_pins_the_version_in_versions_env() -> None:
    v = binaries.versions()
    go_mod = (ROOT / "hack/helm/go.mod").read_text()
    assert re.search(rf"^require helm\.sh/helm/v4 {re.escape(v['HELM_VERSION'])}$", go_mod, re.M)
    assert '"helm.sh/helm/v4/cmd/helm"' in (ROOT / "hack/helm/tools.go").read_text()
    assert (
        'helm_dir="$cache_root/bin/helm-${HELM_VERSION}"' in (ROOT / "hack/build-control-plane").read_text()
    )


def test_object_store_servers_have_their_own_cache_directories() -> None:
    dirs = {name: binaries.object_store_server_cache_dir(name) for name in binaries.OBJECT_STORE_SERVERS}
    v = binaries.versions()
    assert dirs["minio"].name == f"minio-{v['MINIO_VERSION']}"
    assert dirs["fake-gcs-server"].name == f"fake-gcs-server-{v['FAKE_GCS_SERVER_VERSION']}"
    assert all(d.parent == binaries.cache_bin_dir().parent for d in dirs.values())
    assert not set(binaries.OBJECT_STORE_SERVERS) & set(binaries.NAMES)  # kwokctl never sees them


def test_object_store_server_without_cache_or_build_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLOPS_PLATFORM_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="--object-stores-only"):
        binaries.object_store_server("minio", build=False)
    cached = binaries.object_store_server_cache_dir("fake-gcs-server") / "fake-gcs-server"
    cached.parent.mkdir(parents=True)
    cached.write_text("#!/bin/sh\n")
    assert binaries.object_store_server("fake-gcs-server", build=False) == cached


def test_metrics_server_has_its_own_cache_directory_and_version() -> None:
    d = binaries.metrics_server_cache_dir()
    assert d.name == f"metrics-server-{binaries.versions()['METRICS_SERVER_VERSION']}"
    assert d.parent == binaries.cache_bin_dir().parent and d != binaries.cache_bin_dir()
    assert "metrics-server" in binaries.NAMES  # kwokctl runs it
    assert binaries.expected_version("metrics-server") == binaries.versions()["METRICS_SERVER_VERSION"]


def test_promtool_has_its_own_cache_directory() -> None:
    d = binaries.promtool_cache_dir()
    assert d.name == f"promtool-{binaries.versions()['PROMTOOL_VERSION']}"
    assert d.parent == binaries.cache_bin_dir().parent and d != binaries.cache_bin_dir()
    assert "promtool" not in binaries.NAMES  # not a control-plane binary: kwokctl never sees it


def _config(**kw: Any) -> dict[str, Any]:
    bins = binaries.Binaries({name: Path(f"/opt/bin/{name}") for name in binaries.NAMES})
    conf: dict[str, Any] = yaml.safe_load(
        clusterconfig.kwokctl_config(
            bins, metrics_server_manifests="/opt/ms/manifests/overlays/release", **kw
        )
    )
    return conf


def _patches(conf: dict[str, Any], component: str) -> dict[str, str]:
    return {
        a["key"]: a["value"]
        for p in conf["componentsPatches"]
        if p["name"] == component
        for a in p["extraArgs"]
    }


def test_kwokctl_configuration_binds_loopback_with_rbac_and_our_binaries() -> None:
    opts = _config()["options"]
    assert opts["bindAddress"] == "127.0.0.1"
    assert opts["runtime"] == "binary"
    assert opts["kubeAuthorization"] is True and opts["securePort"] is True
    assert opts["kubeApiserverBinary"] == "/opt/bin/kube-apiserver"
    assert opts["kwokControllerBinary"] == "/opt/bin/kwok"
    assert "Stage" in opts["enableCRDs"]


def test_kwokctl_runs_our_metrics_server_from_local_manifests_with_kwoks_usage_crds() -> None:
    conf = _config()
    opts = conf["options"]
    assert opts["enable"] == ["metrics-server"]
    assert opts["metricsServerBinary"] == "/opt/bin/metrics-server"
    # a kustomize directory, never kwokctl's default download of the release manifests
    assert opts["metricsServerManifests"] == ["/opt/ms/manifests/overlays/release"]
    assert not any(m.startswith(("http://", "https://")) for m in opts["metricsServerManifests"])
    assert {"Metric", "ClusterResourceUsage", "ResourceUsage"} <= set(opts["enableCRDs"])
    assert _patches(conf, "metrics-server") == {"metric-resolution": clusterconfig.METRIC_RESOLUTION}
    without = _config(metrics_server=False)
    assert "enable" not in without["options"] and "metricsServerBinary" not in without["options"]
    assert _patches(without, "metrics-server") == {}
    assert _patches(without, "kube-controller-manager") == {}  # upstream's HPA timing


def test_hpa_timing_of_the_local_cluster_is_short_and_explicit() -> None:
    kcm = _patches(_config(), "kube-controller-manager")
    assert kcm == {
        "horizontal-pod-autoscaler-sync-period": "5s",
        "horizontal-pod-autoscaler-downscale-stabilization": "15s",
    }


def test_the_builtin_storage_version_migration_is_on_in_every_variant() -> None:
    """Served by kube-apiserver (gate + beta API version) and run by kube-controller-manager (gate):
    kwokctl hands kubeFeatureGates to both (docs/storage-migration.md)."""
    for kw in ({}, {"metrics_server": False}, {"unthrottled": True}):
        opts = _config(**kw)["options"]
        assert opts["kubeFeatureGates"] == "StorageVersionMigrator=true"
        assert opts["kubeRuntimeConfig"] == "storagemigration.k8s.io/v1beta1=true"


def test_fake_nodes_three_cpu_two_gpu() -> None:
    all_nodes = nodes.fake_nodes()
    pools = [n["metadata"]["labels"][nodes.POOL_LABEL] for n in all_nodes]
    assert pools.count("cpu") == 3 and pools.count("gpu") == 2
    for n in all_nodes:
        assert n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        # metrics-server scrapes the path kwok serves this node's resource metrics on
        name = n["metadata"]["name"]
        path = n["metadata"]["annotations"][nodes.RESOURCE_METRICS_PATH_ANNOTATION]
        assert path == f"/metrics/nodes/{name}/metrics/resource"
        has_gpu = "nvidia.com/gpu" in n["status"]["capacity"]
        assert has_gpu == (n["metadata"]["labels"][nodes.POOL_LABEL] == "gpu")


def test_binary_cache_directory_is_per_version(monkeypatch: object) -> None:
    d = binaries.cache_bin_dir()
    v = binaries.versions()
    assert v["KUBE_VERSION"] in d.name and v["ETCD_VERSION"] in d.name and v["KWOK_VERSION"] in d.name
    assert ROOT not in d.parents  # outside the repo


def test_the_demo_reads_each_expected_condition_of_a_sample() -> None:
    from mlops_platform.devcluster import demo

    obj = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Serving"},
                {"type": "CanaryReady", "status": "False", "reason": "Staging"},
            ]
        }
    }
    assert demo._state(obj, "Ready=True") == "Ready=True"
    assert demo._state(obj, "Ready=True,CanaryReady=True/Canary") == "Ready=True,CanaryReady=False/Staging"
    obj["status"]["conditions"][1] |= {"status": "True", "reason": "Canary"}
    assert demo._state(obj, "Ready=True,CanaryReady=True/Canary") == "Ready=True,CanaryReady=True/Canary"
    assert demo._state({}, "Ready=True") == "Ready: no status yet"


def test_the_demo_shows_how_to_load_the_autoscaled_sample_above_its_target_and_back() -> None:
    from mlops_platform.controllers.inferenceservice import servers
    from mlops_platform.devcluster import demo

    samples = demo.load_samples()
    hpa = next(s for s in samples if s["metadata"]["name"] == "bert-torchserve")
    # the demo waits for a healthy HPA on it (metrics-server serves it), not only Ready
    assert "AutoscalerReady=True" in hpa["metadata"]["annotations"][demo.EXPECT].split(",")[1]
    hints = demo.scaling_hints(samples, "mlops-x")
    # only the sample an HPA scales (not min == max, not scale to zero)
    assert [h for h in hints if h.startswith("Make ")] == [
        "Make bert-torchserve scale 2 -> 5: its pods use 150 % of their CPU request (its HPA targets 60 %):"
    ]
    cmd = "  .venv/bin/mlops-platform dev load bert-torchserve -n mlops-demo --name mlops-x"
    assert f"{cmd} --cpu 150%" in hints
    assert hints[-1] == f"{cmd} --clear"
    # above the target by more than the HPA's 10 % tolerance
    target = servers.default_table()["torchserve"].target_cpu_utilization
    assert target * 1.1 < demo.DEMO_LOAD_PERCENT


def test_cluster_starts_on_one_machine_take_turns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """kwokctl picks ports by counting down to the first free one: two clusters created at once
    (make test starts two) picked the same ports and one never served. The second start waits."""
    monkeypatch.setattr(cluster, "workdir", lambda: tmp_path)
    entered, release, refused = threading.Event(), threading.Event(), threading.Event()
    order: list[str] = []

    def log(msg: str, started: float | None = None) -> None:
        if msg.startswith("waiting for another cluster's start before starting 'b'"):
            refused.set()  # b found the lock held, and blocks on it next

    monkeypatch.setattr(cluster, "_log", log)

    def first() -> None:
        with cluster._ports_lock("a", 0.0):
            order.append("a in")
            entered.set()
            release.wait(10)
            order.append("a out")

    def second() -> None:
        entered.wait(10)
        with cluster._ports_lock("b", 0.0):
            order.append("b in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    assert refused.wait(10), "b never tried the lock"
    assert order == ["a in"]  # b has not entered while a holds it
    release.set()
    for t in threads:
        t.join(10)
    assert order == ["a in", "a out", "b in"]


async def test_a_start_holds_the_lock_until_every_component_listens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """kwokctl returns before metrics-server binds its port (seconds later): make test's second
    cluster, let in at that moment, counted down to the same port and its metrics API never came.
    The start waits for every port of its kwok.yaml."""
    monkeypatch.setattr(cluster, "workdir", lambda: tmp_path)
    with socket.socket() as listening, socket.socket() as silent:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        silent.bind(("127.0.0.1", 0))  # bound, not listening: what kwokctl would count as free
        up, down = listening.getsockname()[1], silent.getsockname()[1]
        config = {
            "kind": "KwokctlConfiguration",
            "components": [
                {"name": "kube-apiserver", "ports": [{"name": "https", "port": up}]},
                {"name": "metrics-server", "ports": [{"name": "https", "port": down}]},
                {"name": "no-ports"},
            ],
        }
        (tmp_path / "clusters" / "x").mkdir(parents=True)
        (tmp_path / "clusters" / "x" / "kwok.yaml").write_text(
            yaml.safe_dump_all([{"kind": "Other"}, config])
        )
        assert cluster.component_ports("x") == {"kube-apiserver": [up], "metrics-server": [down]}
        with pytest.raises(TimeoutError, match=f"not listening: metrics-server:{down}'"):
            await cluster._ports_bound("x", 0.5, binaries.Binaries({}), 0.0)  # no kubeconfig: no restart
        silent.listen()
        await cluster._ports_bound("x", 5, binaries.Binaries({}), 0.0)  # both listen now: returns


def _one_component_cluster(tmp_path: Path, port: int) -> None:
    config = {
        "kind": "KwokctlConfiguration",
        "components": [{"name": "metrics-server", "ports": [{"name": "https", "port": port}]}],
    }
    (tmp_path / "clusters" / "x" / "logs").mkdir(parents=True)
    (tmp_path / "clusters" / "x" / "pids").mkdir()
    (tmp_path / "clusters" / "x" / "kwok.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "clusters" / "x" / "logs" / "metrics-server.log").write_text(
        "I1205 starting\n"
        "panic: unable to load configmap based request-header-client-ca-file: connection refused\n"
    )


async def test_a_component_that_exited_before_it_listened_is_started_again_once_the_api_serves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """metrics-server panics when kube-apiserver does not answer yet as it starts (CI: a loaded
    machine), and kwokctl never restarts it: the start did, and waited 180 s for a port nobody would
    bind. Now its process is found gone (its PID file names a zombie), and once kube-apiserver serves
    ``kwokctl start cluster`` starts it again, without its stale PID file."""
    monkeypatch.setattr(cluster, "workdir", lambda: tmp_path)
    serves = False

    async def api_serves(name: str, timeout: float = 3.0) -> bool:
        return serves

    monkeypatch.setattr(cluster, "_api_serves", api_serves)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        _one_component_cluster(tmp_path, server.getsockname()[1])
        pid = cluster.pid_file("x", "metrics-server")
        pid.write_text("999999999")  # no such process
        calls: list[tuple[str, ...]] = []

        def kwokctl_run(workdir: Path, bins: Any, *args: str, check: bool = True) -> Any:
            calls.append(args)
            assert not pid.exists(), "kwokctl starts only components without a live PID"
            pid.write_text(str(os.getpid()))  # running again
            server.listen()
            return subprocess.CompletedProcess(args, 0, "", "")

        monkeypatch.setattr(kwokctl, "run", kwokctl_run)
        with pytest.raises(TimeoutError, match="not listening: metrics-server"):
            await cluster._ports_bound("x", 0.5, binaries.Binaries({}), 0.0)
        assert calls == []  # not while kube-apiserver does not serve: it would exit again
        serves = True
        await cluster._ports_bound("x", 5, binaries.Binaries({}), 0.0)
    assert calls == [("start", "cluster", "--name", "x")]
    assert cluster.component_running("x", "metrics-server")
    err = capsys.readouterr().err
    assert "metrics-server is not running (its log's last line: panic: unable to load configmap" in err


async def test_a_component_that_keeps_exiting_fails_the_start_with_its_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cluster, "workdir", lambda: tmp_path)

    async def api_serves(name: str, timeout: float = 3.0) -> bool:
        return True

    monkeypatch.setattr(cluster, "_api_serves", api_serves)
    calls: list[tuple[str, ...]] = []

    def kwokctl_run(workdir: Path, bins: Any, *args: str, check: bool = True) -> Any:
        calls.append(args)  # starts it, and it exits again at once
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(kwokctl, "run", kwokctl_run)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        _one_component_cluster(tmp_path, silent.getsockname()[1])
        with pytest.raises(
            RuntimeError, match="metrics-server of cluster 'x' exited again after 3 restarts"
        ) as e:
            await cluster._ports_bound("x", 30, binaries.Binaries({}), 0.0)
    assert "panic: unable to load configmap" in str(e.value)
    assert len(calls) == cluster.COMPONENT_RESTARTS


def test_a_zombie_is_not_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kwokctl's own check (signal 0) counts a zombie as running; ours does not."""
    monkeypatch.setattr(cluster, "workdir", lambda: tmp_path)
    (tmp_path / "clusters" / "x" / "pids").mkdir(parents=True)
    child = subprocess.Popen(["true"])
    try:
        cluster.pid_file("x", "c").write_text(str(child.pid))
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # it has exited, not reaped: a zombie
        os.kill(child.pid, 0)  # signal 0 reaches a zombie
        assert not cluster.component_running("x", "c")
        cluster.pid_file("x", "c").write_text(str(os.getpid()))
        assert cluster.component_running("x", "c")
    finally:
        child.wait()


def test_monitoring_go_modules_pin_the_versions_in_versions_env() -> None:
    """The Prometheus Operator binary and its CRDs (hack/crds) are one release; kube-state-metrics is
    pinned; Prometheus is the promtool module's (test above)."""
    v = binaries.versions()
    po = re.escape(v["PROMETHEUS_OPERATOR_VERSION"])
    for pin in ("prometheus-operator", "crds"):
        go_mod = (ROOT / "hack" / pin / "go.mod").read_text()
        assert re.search(
            rf"^\s*(require )?github\.com/prometheus-operator/prometheus-operator {po}$", go_mod, re.M
        )
    ksm = (ROOT / "hack/kube-state-metrics/go.mod").read_text()
    assert re.search(
        rf"^require k8s\.io/kube-state-metrics/v2 {re.escape(v['KUBE_STATE_METRICS_VERSION'])}$", ksm, re.M
    )
    assert 'cmd/prometheus"' in (ROOT / "hack/promtool/tools.go").read_text()
    assert binaries.monitoring_tool_dir("prometheus").name == f"prometheus-{v['PROMTOOL_VERSION']}"


def test_a_failed_kwokctl_create_is_deleted_and_created_once_more(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Under load kube-apiserver can serve after kwokctl gave up loading kwok's CRDs: the cluster is
    taken down and created once more from nothing; a second failure is raised."""
    monkeypatch.setattr(cluster, "workdir", lambda: tmp_path)
    monkeypatch.setattr(
        clusterconfig, "kwokctl_config", lambda *args, **kwargs: "kind: KwokctlConfiguration\n"
    )
    monkeypatch.setattr(fabric, "claim_block", lambda workdir, name: 0)
    calls: list[str] = []

    def create(*args: Any) -> None:
        calls.append("create")
        if calls.count("create") in fails:
            raise RuntimeError('kwokctl create cluster x failed (exit 1):\n{"msg": "Execute exit"}')

    def down(name: str) -> None:
        calls.append(f"down {name}")

    monkeypatch.setattr(kwokctl, "create", create)
    monkeypatch.setattr(cluster, "down", down)
    fails = {1}
    cluster._create(binaries.Binaries({}), "x", 10, 0.0, False, False)
    assert calls == ["create", "down x", "create"]
    assert not cluster._creating_marker("x").exists()
    calls.clear()
    fails = {1, 2}
    with pytest.raises(RuntimeError, match="kwokctl create cluster x failed"):
        cluster._create(binaries.Binaries({}), "x", 10, 0.0, False, False)
    assert calls == ["create", "down x", "create"]


def test_a_cluster_interrupted_while_being_created_is_created_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Ctrl-C during ``kwokctl create cluster`` can leave an API server that serves but a cluster
    without kwok's CRDs: the next ``up`` must not take it for a running one (populate then failed
    with a discovery 404) but take it down and create it again."""
    monkeypatch.setattr(cluster, "workdir", lambda: tmp_path)
    monkeypatch.setattr(binaries, "find", lambda: binaries.Binaries({}))
    downs: list[str] = []

    class Recreated(Exception):
        pass

    def down(name: str) -> None:
        downs.append(name)
        raise Recreated

    monkeypatch.setattr(cluster, "down", down)
    cluster._creating_marker("x").touch()  # what _create leaves until kwokctl succeeded
    with pytest.raises(Recreated):
        cluster.up("x")
    assert downs == ["x"]
