"""Unit checks of the real worker node's pins, addresses and configuration (no cluster, no root)."""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import json
import py_compile
import re
import tomllib
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from tests.unit.test_devcluster import _config, _patches

from mlops_platform.devcluster import binaries, clusterconfig, nodes
from mlops_platform.devcluster.realnode import addons, addressing, configs, fabric, imagebuild, images, pki
from mlops_platform.devcluster.realnode.addressing import Block

ROOT = Path(__file__).resolve().parents[2]


def test_node_go_modules_pin_the_versions_in_versions_env() -> None:
    v = binaries.versions()
    for d, module, key in (
        ("containerd", "github.com/containerd/containerd/v2", "CONTAINERD_VERSION"),
        ("cni-plugins", "github.com/containernetworking/plugins", "CNI_PLUGINS_VERSION"),
        ("kube-router", "github.com/cloudnativelabs/kube-router/v2", "KUBE_ROUTER_VERSION"),
        ("coredns", "github.com/coredns/coredns", "COREDNS_VERSION"),
    ):
        go_mod = (ROOT / "hack" / d / "go.mod").read_text()
        assert re.search(rf"^require {re.escape(module)} {re.escape(v[key])}$", go_mod, re.M), d
        assert module in (ROOT / "hack" / d / "tools.go").read_text(), d
        assert binaries.NODE_TOOLS[d] == key
        assert binaries.node_tool_dir(d).name == f"{d}-{v[key]}"
    tools = (ROOT / "hack/k8s/tools.go").read_text()  # the same k8s.io/kubernetes as the control plane
    assert '"k8s.io/kubernetes/cmd/kubelet"' in tools and '"k8s.io/kubernetes/cmd/kube-proxy"' in tools


def test_every_cluster_block_is_a_distinct_slash_16_with_its_parts_inside() -> None:
    blocks = [Block(s) for s in range(addressing.SLOTS)]
    nets = [ipaddress.ip_network(b.network) for b in blocks]
    assert all(not a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
    b = Block(3)
    assert b.network == "10.203.0.0/16"
    assert (b.host_address, b.fabric_uplink_address, b.api_address) == (
        "10.203.255.1",
        "10.203.255.2",
        "10.203.0.1",
    )
    assert (b.node_address(0), b.pod_cidr(0), b.pod_gateway(0)) == (
        "10.203.0.10",
        "10.203.1.0/24",
        "10.203.1.1",
    )
    assert b.pod_cidr(1) == "10.203.2.0/24"
    assert (b.service_cidr, b.kubernetes_service_ip, b.dns_service_ip) == (
        "10.203.128.0/17",
        "10.203.128.1",
        "10.203.128.10",
    )
    net = ipaddress.ip_network(b.network)
    parts = [b.service_cidr, b.pod_cidr(0), b.pod_cidr(addressing.MAX_NODES - 1), b.pod_cidrs]
    assert all(ipaddress.ip_network(p).subnet_of(net) for p in parts)  # type: ignore[arg-type]
    fake = ipaddress.ip_network(b.fake_pod_cidr)
    assert fake.subnet_of(ipaddress.ip_network(b.pod_cidrs))  # type: ignore[arg-type]
    assert not fake.overlaps(ipaddress.ip_network(b.pod_cidr(addressing.MAX_NODES - 1)))
    # pods never in the Service range, nor the host's /30
    assert not ipaddress.ip_network(b.pod_cidrs).overlaps(ipaddress.ip_network(b.service_cidr))
    assert ipaddress.ip_address(b.host_address) not in ipaddress.ip_network(b.pod_cidrs)
    with pytest.raises(ValueError, match="slot 16"):
        Block(addressing.SLOTS)
    with pytest.raises(ValueError, match="node index"):
        b.pod_cidr(addressing.MAX_NODES)


def test_a_free_slot_is_neither_held_nor_overlapped_by_a_host_route() -> None:
    assert addressing.free_slot(set(), ["default", "192.0.2.0/24"]) == 0
    assert addressing.free_slot({0, 1}, []) == 2
    assert addressing.free_slot(set(), ["10.200.5.0/24", "10.201.0.0/16"]) == 2
    assert addressing.free_slot(set(), ["10.200.0.0/13"]) == 8  # 10.200-10.207 taken by the host
    with pytest.raises(RuntimeError, match="no free address block"):
        addressing.free_slot(set(range(15)), ["10.215.0.0/16"])


def test_the_api_server_reaches_kubelets_by_ip_advertises_the_fabric_and_kwok_leaves_real_nodes() -> None:
    b = Block(2)
    conf = _config(block=b, pki_dir=Path("/c/pki"))
    api = _patches(conf, "kube-apiserver")
    assert api["service-cluster-ip-range"] == b.service_cidr
    assert api["advertise-address"] == b.api_address
    # never Hostname: the API server would resolve a node's name through the machine's DNS
    assert api["kubelet-preferred-address-types"] == "InternalIP"
    assert (api["kubelet-client-certificate"], api["kubelet-client-key"]) == (
        "/c/pki/admin.crt",
        "/c/pki/admin.key",
    )
    assert conf["options"]["kubeApiserverCertSANs"] == [b.api_address, b.kubernetes_service_ip]
    kwok = _patches(conf, "kwok-controller")
    assert kwok == {
        "manage-all-nodes": "false",
        "manage-nodes-with-annotation-selector": "kwok.x-k8s.io/node=fake",
        "node-ip": "127.0.0.1",  # fake nodes reached by an IP too: where kwok serves their kubelet API
        "cidr": "10.202.64.1/18",  # fake pods' addresses inside the block: routed into the fabric
    }
    assert all(n["metadata"]["annotations"][nodes.FAKE_NODE_ANNOTATION] == "fake" for n in nodes.fake_nodes())
    # a stopped kubelet's node goes NotReady after upstream's 40 s, not kwokctl's default 5 x that
    assert conf["options"]["heartbeatFactor"] == 1
    plain = _config()
    assert "advertise-address" not in _patches(plain, "kube-apiserver") and not _patches(
        plain, "kwok-controller"
    )


def test_kubelet_config_leaves_the_host_alone_and_keeps_pods_off_unless_they_tolerate() -> None:
    b = Block(0)
    conf = configs.kubelet_config(
        block=b, ca_file=Path("/p/ca.crt"), cgroup_root="/mlops.x.real-node-0", max_pods=30
    )
    assert conf["failCgroupV1"] is False and conf["cgroupDriver"] == "cgroupfs"
    assert conf["cgroupRoot"] == "/mlops.x.real-node-0"
    # the global sysctls are masked in the node's mount namespace, not rewritten on the host
    assert conf["protectKernelDefaults"] is False
    assert set(configs.KUBELET_SYSCTLS) == {
        "vm/overcommit_memory",
        "vm/panic_on_oom",
        "kernel/panic",
        "kernel/panic_on_oops",
    }
    assert conf["resolvConf"] == "" and conf["clusterDNS"] == [b.dns_service_ip]
    assert conf["readOnlyPort"] == 0 and conf["authentication"]["anonymous"]["enabled"] is False
    assert conf["authorization"]["mode"] == "Webhook"
    assert conf["registerWithTaints"] == [configs.REAL_NODE_TAINT]
    assert conf["imageGCHighThresholdPercent"] == 100  # imported images cannot be pulled again


def test_kube_proxy_leaves_the_global_conntrack_settings_alone() -> None:
    conf = configs.kube_proxy_config(block=Block(1), node_name="real-node-0", kubeconfig=Path("/k"))
    assert conf["mode"] == "nftables" and conf["hostnameOverride"] == "real-node-0"
    assert set(conf["conntrack"].values()) == {0, "0s"}
    assert conf["clusterCIDR"] == Block(1).pod_cidrs
    assert conf["metricsBindAddress"].startswith("127.0.0.1:")


def test_containerd_restricts_oom_score_adj_and_pins_the_local_pause_image() -> None:
    conf = tomllib.loads(
        configs.containerd_config(
            cni_bin_dir=Path("/cni"),
            cni_conf_dir=Path("/n/cni"),
            runc=Path("/usr/sbin/runc"),
            pause_image=images.PAUSE.ref,
        )
    )
    assert conf["version"] == 3
    cri = conf["plugins"]["io.containerd.cri.v1.runtime"]
    assert cri["restrict_oom_score_adj"] is True
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["options"] == {"SystemdCgroup": False, "BinaryName": "/usr/sbin/runc"}
    assert cri["cni"] == {"bin_dirs": ["/cni"], "conf_dir": "/n/cni"}
    assert (
        conf["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == "mlops.local/pause:3.10"
    )
    assert conf["grpc"]["address"] == configs.CONTAINERD_SOCKET


def test_each_node_s_pods_get_addresses_from_its_own_range_without_masquerade() -> None:
    b = Block(4)
    bridge = json.loads(configs.cni_conflist(block=b, index=1))["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": b.pod_cidr(1), "gateway": b.pod_gateway(1)}]]


def test_images_carry_the_local_registry_name_and_change_key_with_their_inputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert images.PAUSE.ref == "mlops.local/pause:3.10"
    assert all(r.ref.startswith("mlops.local/") for r in images.ALL)
    assert images.PYTHON.key() == images.PYTHON.key() != images.PAUSE.key()
    other_base = dataclasses.replace(images.PYTHON, debian_packages=("python3", "curl"))
    assert other_base.key() != images.PYTHON.key()
    assert dataclasses.replace(images.MLSERVER, base=other_base).key() != images.MLSERVER.key()
    before = images.MLSERVER.key()
    pins = tmp_path / "pins.txt"
    pins.write_text("mlserver==1.7.2\n")
    monkeypatch.setattr(imagebuild, "_requirements", lambda recipe: pins)
    assert images.MLSERVER.key() != before  # a pin changed: another image
    pinned, python_key = images.MLSERVER.key(), images.PYTHON.key()
    monkeypatch.setattr(imagebuild, "_PIP_STEP_VERSION", "next")  # the pip step changed: pip's images only
    assert images.MLSERVER.key() != pinned and images.PYTHON.key() == python_key


def test_an_image_s_bytecode_checked_by_source_mtime_is_found(tmp_path: Path) -> None:
    """Packing rounds mtimes, so bytecode an image holds must be checked by its source's hash."""
    for name, mode in (
        ("by_hash", py_compile.PycInvalidationMode.CHECKED_HASH),
        ("by_mtime", py_compile.PycInvalidationMode.TIMESTAMP),
    ):
        (tmp_path / "pkg").mkdir(exist_ok=True)
        source = tmp_path / "pkg" / f"{name}.py"
        source.write_text("X = 1\n")
        py_compile.compile(str(source), invalidation_mode=mode, doraise=True)
    stale = imagebuild.timestamp_checked_bytecode(tmp_path)
    assert [p.name.split(".")[0] for p in stale] == ["by_mtime"]


def _rsa_ca() -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kwok-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(pem), key_pem


def test_the_kubelet_is_a_node_to_the_api_server_signed_by_the_cluster_ca(tmp_path: Path) -> None:
    ca_pem, ca_key = _rsa_ca()
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster/ca.crt").write_bytes(ca_pem)
    (tmp_path / "cluster/ca.key").write_bytes(ca_key)
    path = pki.write_kubeconfig(
        tmp_path / "node", tmp_path / "cluster", pki.kubelet("real-node-0"), "https://10.200.0.1:6443"
    )
    kc = yaml.safe_load(path.read_text())
    assert kc["clusters"][0]["cluster"]["server"] == "https://10.200.0.1:6443"
    user = kc["users"][0]["user"]
    cert = x509.load_pem_x509_certificate(Path(user["client-certificate"]).read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:real-node-0"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:nodes"
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    ca = x509.load_pem_x509_certificate(ca_pem)
    ca_pub = ca.public_key()
    assert isinstance(ca_pub, rsa.RSAPublicKey)
    assert cert.signature_hash_algorithm is not None
    ca_pub.verify(
        cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), cert.signature_hash_algorithm
    )
    assert Path(user["client-key"]).stat().st_mode & 0o077 == 0


def test_clusters_claim_distinct_blocks_and_release_them(tmp_path: Path) -> None:
    a = fabric.claim_block(tmp_path, "a")
    b = fabric.claim_block(tmp_path, "b")
    assert a != b and fabric.claim_block(tmp_path, "a") == a  # held until released
    assert fabric.block_of(tmp_path, "b") == b and fabric.block_of(tmp_path, "c") is None
    fabric.release_block(tmp_path, "a")
    assert fabric.block_of(tmp_path, "a") is None
    assert fabric.claim_block(tmp_path, "c") == a  # the lowest free one again


def test_the_cluster_dns_is_kubeadm_s_on_the_real_node_with_the_local_image_and_no_upstream() -> None:
    b = Block(5)
    objs = {o["kind"]: o for o in addons.coredns_objects(b)}
    assert set(objs) == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Service",
        "Deployment",
    }
    assert objs["Service"]["spec"]["clusterIP"] == b.dns_service_ip
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert (
        pod["containers"][0]["image"]
        == images.COREDNS.ref
        == f"mlops.local/coredns:{binaries.versions()['COREDNS_VERSION']}"
    )
    assert pod["nodeSelector"][configs.REAL_NODE_LABEL] == "true"
    assert {**configs.REAL_NODE_TAINT, "operator": "Equal"} in pod["tolerations"]
    corefile = objs["ConfigMap"]["data"]["Corefile"]
    assert "kubernetes cluster.local" in corefile
    assert "forward" not in corefile  # no DNS server outside the cluster is ever asked
    rules = addons.kube_router_objects()[0]["rules"]
    assert all(set(r["verbs"]) == {"get", "list", "watch"} for r in rules)  # read-only
    assert addons.kube_router_objects()[1]["subjects"][0]["name"] == pki.KUBE_ROUTER.user


def _pins(name: str) -> dict[str, str]:
    path = ROOT / "src/mlops_platform/devcluster/realnode/requirements" / name
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return dict(ln.split("==", 1) for ln in lines)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_operator_image_pins_every_runtime_dependency_of_the_project() -> None:
    pins = {_normal(k): v for k, v in _pins("operator.txt").items()}
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {_normal(re.split(r"[<>=!~\[;\s]", d, maxsplit=1)[0]) for d in declared}
    assert names <= set(pins), f"refresh requirements/operator.txt: {sorted(names - set(pins))} unpinned"
    assert images.OPERATOR.base is images.PYTHON and images.OPERATOR.project
    assert "--config.user=65532:65532" in images.OPERATOR.config  # non-root, as the Dockerfile


def test_the_model_server_image_has_upstream_s_pins_of_mlserver_1_7_1() -> None:
    pins = {_normal(k): v for k, v in _pins("mlserver-1.7.1.txt").items()}
    assert pins["mlserver"] == pins["mlserver-sklearn"] == pins["mlserver-xgboost"] == "1.7.1"
    # upstream's poetry.lock at the 1.7.1 tag
    assert (pins["scikit-learn"], pins["xgboost"], pins["uvloop"]) == ("1.5.2", "2.1.2", "0.21.0")
    assert "nvidia-nccl-cu12" not in pins  # multi-GPU only: the real node has no GPU
    assert images.MLSERVER.ref == "mlops.local/mlserver:1.7.1"
    assert images.by_name(["mlserver"]) == [images.MLSERVER]
    with pytest.raises(ValueError, match="no local image nope: the images are pause, python"):
        images.by_name(["nope"])


def test_the_local_operator_image_agrees_with_the_dockerfile() -> None:
    """One recipe in two forms (the Dockerfile for users' builders, images.OPERATOR for the local
    cluster): the same user, entrypoint, ports and environment."""
    docker = (ROOT / "Dockerfile").read_text()
    final = docker.rsplit("\nFROM ", 1)[1]  # the last stage: what the image is
    conf = images.OPERATOR.config
    user = re.search(r"^USER (\S+)$", final, re.M)
    assert user and f"--config.user={user.group(1)}" in conf
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", final, re.M)
    assert entry
    assert [c.split("=", 1)[1] for c in conf if c.startswith("--config.entrypoint=")] == json.loads(
        entry.group(1)
    )
    exposed = re.search(r"^EXPOSE (.+)$", final, re.M)
    assert exposed
    assert {f"--config.exposedports={p}/tcp" for p in exposed.group(1).split()} <= set(conf)
    for var in ("PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp"):
        assert var in final and f"--config.env={var}" in conf, var
    assert "pip uninstall --yes pip" in docker  # and the local image never has pip (tests/e2e install)
    # the same pinned packages, exactly (no resolver choosing newer ones in one of the two)
    pins = re.search(r"^ARG PINS=(\S+)$", docker, re.M)
    assert pins and (ROOT / pins.group(1)) == ROOT / "src/mlops_platform/devcluster/realnode/requirements" / (
        images.OPERATOR.requirements
    )
    assert docker.count("--no-deps") == 3


def test_an_image_name_may_carry_a_tag_to_import_it_under_and_a_bad_tag_is_named() -> None:
    assert images.parse_ref("mlops-platform") == ("mlops-platform", "")
    assert images.parse_ref("mlops-platform:0.1.0-upgrade") == ("mlops-platform", "0.1.0-upgrade")
    assert images.OPERATOR.ref_with("0.2.0") == "mlops.local/mlops-platform:0.2.0"
    with pytest.raises(ValueError, match="'-x' is not an image tag"):
        images.parse_ref("mlops-platform:-x")
    with pytest.raises(ValueError, match="no local image nope"):
        images.by_name([images.parse_ref("nope:1")[0]])


def test_the_audit_log_keeps_every_request_of_the_in_cluster_operator_service_accounts() -> None:
    group = f"system:serviceaccounts:{clusterconfig.IN_CLUSTER_NAMESPACE}"
    rules = clusterconfig.AUDIT_POLICY["rules"]
    (rule,) = [r for r in rules if group in r.get("userGroups", [])]
    assert rule["level"] == "Metadata" and "verbs" not in rule and "resources" not in rule
    assert rules.index(rule) < rules.index({"level": "None"})
