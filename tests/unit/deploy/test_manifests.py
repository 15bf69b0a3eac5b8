"""The install set: committed files are the generated ones, restricted pods, scoping, chart == objects."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlops_platform.api import crd
from mlops_platform.cli import operator
from mlops_platform.deploy import defaults as deploy_defaults
from mlops_platform.deploy import manifests
from mlops_platform.devcluster import binaries
from mlops_platform.runtime import generated, quantity
from mlops_platform.runtime.control import manager
from mlops_platform.testing import helmchart

ROOT = Path(__file__).resolve().parents[3]
#: the scale benchmark's run with every child kind on, from which the defaults are sized
SIZING_BENCHMARK = Path("docs/benchmarks/scale-operator-memory.json")
Obj = dict[str, Any]
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}


def key(o: Obj) -> tuple[str, str, str]:
    return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])


def by_key(objs: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    out = {key(o): o for o in objs}
    assert len(out) == len(objs), "two objects with the same kind, namespace and name"
    return out


def is_activators(o: Obj) -> bool:
    return (o["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "activator"


def of_kind(objs: list[Obj], kind: str) -> list[Obj]:
    """The operator's own objects of ``kind`` (not the activator's: tested on their own)."""
    return [o for o in objs if o["kind"] == kind and not is_activators(o)]


def kustomize(directory: Path) -> list[Obj]:
    """The objects of a kustomization that only lists ``resources`` (files or directories)."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert set(k) == {"apiVersion", "kind", "resources"}, "this resolver knows only `resources`"
    out: list[Obj] = []
    for res in k["resources"]:
        path = directory / res
        out += kustomize(path) if path.is_dir() else list(yaml.safe_load_all(path.read_text()))
    return out


def json_patch(obj: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902 ``add`` (the only operation the generated overlays use)."""
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] == "add", op
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = out
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node.insert(len(node) if last == "-" else int(last), op["value"])
        else:
            node[last] = op["value"]
    return out


def kustomize_patched(directory: Path) -> list[Obj]:
    """:func:`kustomize` plus ``patches`` (RFC 6902 files, targets by kind and name)."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert set(k) == {"apiVersion", "kind", "resources", "patches"}
    objs: list[Obj] = []
    for res in k["resources"]:
        path = directory / res
        objs += kustomize(path) if path.is_dir() else list(yaml.safe_load_all(path.read_text()))
    for patch in k["patches"]:
        target, ops = patch["target"], yaml.safe_load((directory / patch["path"]).read_text())
        hits = [
            i
            for i, o in enumerate(objs)
            if (o["kind"], o["metadata"]["name"]) == (target["kind"], target["name"])
        ]
        assert len(hits) == 1, target
        objs[hits[0]] = json_patch(objs[hits[0]], ops)
    return objs


@pytest.fixture(scope="module")
def objs() -> list[Obj]:
    return manifests.install_objects()


@pytest.fixture(scope="module")
def pod(objs: list[Obj]) -> Obj:
    [deploy] = of_kind(objs, "Deployment")
    spec: Obj = deploy["spec"]["template"]["spec"]
    return spec


# -- generated files ---------------------------------------------------------------------------------


def _check(root: Path) -> str:
    return generated.check(root, manifests.generated_files(), deploy_defaults.OWNED_DIRS)


def test_the_committed_files_are_the_generated_ones() -> None:
    report = _check(ROOT)
    assert not report, f"run `python -m mlops_platform.deploy.manifests --write`:\n{report}"
    assert manifests.main(["--check"]) == 0


def test_check_shows_a_diff_and_stale_files_and_write_repairs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert manifests.main(["--write", "--root", str(tmp_path)]) == 0
    assert _check(tmp_path) == ""
    deployment = tmp_path / "config/manager/deployment.yaml"
    deployment.write_text(deployment.read_text().replace("replicas: 2", "replicas: 5"))
    (tmp_path / "charts/mlops-platform/templates/leftover.yaml").write_text("kind: ConfigMap\n")
    (tmp_path / "config/crd").mkdir()
    (tmp_path / "config/crd/unowned.yaml").write_text("kind: ConfigMap\n")  # not a generated directory
    assert manifests.main(["--check", "--root", str(tmp_path)]) == 1
    out = capsys.readouterr()
    assert "--- config/manager/deployment.yaml\n+++ generated\n" in out.out
    assert "-  replicas: 5\n+  replicas: 2\n" in out.out
    assert "stale generated file: charts/mlops-platform/templates/leftover.yaml" in out.out
    assert "unowned" not in out.out
    assert "run `python -m mlops_platform.deploy.manifests --write`" in out.err
    (tmp_path / "config/default/kustomization.yaml").unlink()
    assert "--- config/default/kustomization.yaml" in _check(tmp_path)  # a missing file differs too
    assert manifests.main(["--write", "--root", str(tmp_path)]) == 0
    assert _check(tmp_path) == ""
    assert not (tmp_path / "charts/mlops-platform/templates/leftover.yaml").exists()
    assert (tmp_path / "config/crd/unowned.yaml").exists()


def test_write_and_check_refuse_non_default_parameters() -> None:
    with pytest.raises(SystemExit):
        manifests.main(["--check", "--namespace", "other"])


def test_main_prints_the_install_set(capsys: pytest.CaptureFixture[str]) -> None:
    assert manifests.main(["--namespace", "ops", "--watch-namespace", "team-a", "--replicas", "3"]) == 0
    printed = list(yaml.safe_load_all(capsys.readouterr().out))
    assert printed == manifests.install_objects(namespace="ops", watch_namespaces=["team-a"], replicas=3)


def test_render_is_the_install_objects() -> None:
    text = manifests.render(namespace="ops", image="img:1")
    assert text.startswith(deploy_defaults.HEADER)
    assert list(yaml.safe_load_all(text)) == manifests.install_objects(namespace="ops", image="img:1")
    assert "&id" not in text and "*id" not in text  # no YAML aliases


def test_config_default_is_the_install_set(objs: list[Obj]) -> None:
    assert by_key(kustomize(ROOT / "config/default")) == by_key(objs)


def _without_crd(objs: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    return {k: o for k, o in by_key(objs).items() if k[0] != "CustomResourceDefinition"}


def test_the_chart_renders_to_the_install_set() -> None:
    chart = ROOT / deploy_defaults.CHART_DIR
    assert by_key(helmchart.template(chart)) == by_key(manifests.install_objects())
    custom = helmchart.template(
        chart, {"namespace": "ops", "image": "reg.example/op@sha256:ab", "replicas": 3}
    )
    expected = manifests.install_objects(namespace="ops", image="reg.example/op@sha256:ab", replicas=3)
    assert _without_crd(custom) == _without_crd(expected)
    # Helm never templates crds/: its CRD names the webhook Service in the default namespace
    [chart_crd] = of_kind(custom, "CustomResourceDefinition")
    assert (
        chart_crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["namespace"] == "mlops-system"
    )
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert (meta["apiVersion"], meta["name"], meta["appVersion"]) == ("v2", "mlops-platform", "0.1.0")
    assert (chart / "crds" / crd.CRD_FILE.name).read_text() == crd.render()


def test_the_charts_resources_are_values() -> None:
    chart = ROOT / deploy_defaults.CHART_DIR
    resources = {"requests": {"cpu": "250m", "memory": "1Gi"}, "limits": {"cpu": "2000m", "memory": "2Gi"}}
    for objs in (
        helmchart.template(chart, {"resources": resources}),
        manifests.install_objects(resources=resources),
    ):
        [deploy] = of_kind(objs, "Deployment")
        [c] = deploy["spec"]["template"]["spec"]["containers"]
        assert c["resources"] == resources


#: what the e2e gives the chart to put the operator's pods on the real node's tainted node
REAL_NODE_SELECTOR = {"mlops.platform/real-node": "true"}
REAL_NODE_TOLERATIONS: list[Obj] = [
    {"key": "mlops.platform/real-node", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
]


def _pod_spec(objs: list[Obj]) -> Obj:
    [deploy] = of_kind(objs, "Deployment")
    spec: Obj = deploy["spec"]["template"]["spec"]
    return spec


def test_the_charts_node_selector_and_tolerations_are_values() -> None:
    chart = ROOT / deploy_defaults.CHART_DIR
    values = yaml.safe_load((chart / "values.yaml").read_text())
    assert (values["nodeSelector"], values["tolerations"]) == ({"kubernetes.io/os": "linux"}, [])
    for objs in (helmchart.template(chart), manifests.install_objects()):
        assert _pod_spec(objs)["nodeSelector"] == {"kubernetes.io/os": "linux"}
        assert "tolerations" not in _pod_spec(objs)
    # Helm merges a map into the default one (a list replaces)
    selector = {"kubernetes.io/os": "linux", **REAL_NODE_SELECTOR}
    for cert_manager in (False, True):
        rendered = helmchart.template(
            chart,
            {
                "nodeSelector": REAL_NODE_SELECTOR,
                "tolerations": REAL_NODE_TOLERATIONS,
                "webhook": {"certManager": {"enabled": cert_manager}},
            },
        )
        assert _pod_spec(rendered)["nodeSelector"] == selector
        assert _pod_spec(rendered)["tolerations"] == REAL_NODE_TOLERATIONS
        expected = manifests.install_objects(
            node_selector=selector, tolerations=REAL_NODE_TOLERATIONS, cert_manager=cert_manager
        )
        assert _without_crd(rendered) == _without_crd(expected)
    # null drops a default key; an empty selector leaves the field out
    only = helmchart.template(chart, {"nodeSelector": {"kubernetes.io/os": None, **REAL_NODE_SELECTOR}})
    assert _pod_spec(only)["nodeSelector"] == REAL_NODE_SELECTOR
    none = helmchart.template(chart, {"nodeSelector": {"kubernetes.io/os": None}})
    assert "nodeSelector" not in _pod_spec(none)
    assert _without_crd(none) == _without_crd(manifests.install_objects(node_selector={}))


@pytest.mark.parametrize(
    "values",
    [
        None,
        {"webhook": {"certManager": {"enabled": True}}},
        {"nodeSelector": REAL_NODE_SELECTOR, "tolerations": REAL_NODE_TOLERATIONS},
        {"activator": {"enabled": False}},
    ],
    ids=["defaults", "cert-manager", "real-node", "no-activator"],
)
def test_helm_lint_strict_passes(values: Obj | None) -> None:
    report = helmchart.lint(ROOT / deploy_defaults.CHART_DIR, values)
    assert "1 chart(s) linted, 0 chart(s) failed" in report, report


def test_a_helm_error_carries_helms_stderr(tmp_path: Path) -> None:
    with pytest.raises(helmchart.HelmError) as caught:
        helmchart.template(tmp_path / "no-chart")
    assert caught.value.returncode != 0
    assert "no-chart" in caught.value.stderr
    assert caught.value.stderr.strip() in str(caught.value)
    broken = tmp_path / "broken"  # lint's findings are on its stdout: in the message too
    (broken / "templates").mkdir(parents=True)
    (broken / "Chart.yaml").write_text("apiVersion: v2\nname: broken\nversion: 0.1.0\n")
    (broken / "templates" / "a.yaml").write_text("a: {{ .Values.missing.x }}\n")
    with pytest.raises(helmchart.HelmError, match=r"(?s)chart\(s\) failed.*nil pointer evaluating"):
        helmchart.lint(broken)


# -- the operator's pods: Pod Security restricted ---------------------------------------------------


def test_the_namespace_enforces_audits_and_warns_restricted(objs: list[Obj]) -> None:
    [ns] = of_kind(objs, "Namespace")
    labels = ns["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == deploy_defaults.POD_SECURITY_VERSION
    kube = binaries.versions()["KUBE_VERSION"]
    assert ".".join(kube.split(".")[:2]) == deploy_defaults.POD_SECURITY_VERSION, "pin the tested minor"


def test_the_pod_meets_the_restricted_profile(pod: Obj) -> None:
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert isinstance(psc["runAsUser"], int) and psc["runAsUser"] > 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    for key_ in ("hostNetwork", "hostPID", "hostIPC", "hostUsers"):
        assert key_ not in pod
    assert all(set(v) == {"name", "emptyDir"} for v in pod["volumes"])
    [c] = pod["containers"]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["privileged"] is False
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == psc["runAsUser"] == deploy_defaults.UID
    assert "ports" not in c or all("hostPort" not in p for p in c["ports"])
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_the_pod_runs_well(pod: Obj) -> None:
    [c] = pod["containers"]
    assert pod["automountServiceAccountToken"] is True  # it talks to the API server
    assert pod["terminationGracePeriodSeconds"] > manager.Options.graceful_shutdown_timeout
    assert c["resources"] == deploy_defaults.RESOURCES
    spread = {t["topologyKey"] for t in pod["topologySpreadConstraints"]}
    assert "kubernetes.io/hostname" in spread
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": 8080, "health": 8081, "webhook": 9443}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"]["port"] == "health"
    assert c["startupProbe"]["httpGet"]["port"] == "health"


def test_the_memory_request_and_limit_hold_the_rss_measured_at_5000(pod: Obj) -> None:
    """The memory the scale benchmark measured with every child kind on (monitoring and network
    policy), at the largest N the chart's comment promises: the request at least the steady RSS (the
    scheduler places the pod where it fits), the limit 1.5 x the peak (a restart's initial sync,
    the webhook's work, bigger objects than the benchmark's). A new measurement above it fails here
    until the defaults follow (docs/install.md, "Sizing")."""
    measured = json.loads((ROOT / SIZING_BENCHMARK).read_text())
    [run] = [r for r in measured["runs"] if r["impl"] == "operator" and r["count"] == 5000]
    [c] = pod["containers"]
    assert quantity.parse(c["resources"]["requests"]["memory"]) >= run["rss_steady"]
    assert quantity.parse(c["resources"]["limits"]["memory"]) >= Decimal("1.5") * run["rss_peak"]
    # one core: the operator's one Python thread cannot use more, and a lower limit throttles it
    assert quantity.parse(c["resources"]["limits"]["cpu"]) == 1


def test_two_leader_elected_replicas_roll_one_at_a_time(objs: list[Obj]) -> None:
    [deploy] = of_kind(objs, "Deployment")
    spec = deploy["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0},
    }
    [c] = spec["template"]["spec"]["containers"]
    assert c["command"] == ["mlops-platform", "run"]
    assert "--leader-elect" in c["args"]
    assert "--leader-election-namespace=mlops-system" in c["args"]
    assert "--health-probe-bind-address=0.0.0.0:8081" in c["args"]
    assert "--metrics-bind-address=0.0.0.0:8080" in c["args"]
    assert not any(a.startswith("--namespace") for a in c["args"])  # cluster mode


def test_the_flags_are_the_ones_run_accepts(objs: list[Obj]) -> None:
    for mode in (objs, manifests.install_objects(watch_namespaces=["a", "b"])):
        for deploy in of_kind(mode, "Deployment"):
            [c] = deploy["spec"]["template"]["spec"]["containers"]
            ctx = operator.run.make_context("run", list(c["args"]))
            assert ctx.params["leader_elect"] is True
            assert ctx.params["health_probe_bind_address"] == "0.0.0.0:8081"
            assert ctx.params["webhook_bind_address"] == "0.0.0.0:9443"
            assert ctx.params["webhook_secret"] == "mlops-system/mlops-platform-webhook-tls"
            assert list(ctx.params["webhook_dns_names"]) == [
                "mlops-platform-webhook.mlops-system.svc",
                "mlops-platform-webhook.mlops-system.svc.cluster.local",
            ]
    [deploy] = of_kind(manifests.install_objects(cert_manager=True), "Deployment")
    [c] = deploy["spec"]["template"]["spec"]["containers"]
    ctx = operator.run.make_context("run", list(c["args"]))
    assert str(ctx.params["webhook_cert_dir"]) == deploy_defaults.CERT_DIR


def test_the_dockerfile_matches_the_deployment(pod: Obj) -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert f"USER {deploy_defaults.UID}:{deploy_defaults.UID}" in text
    assert 'ENTRYPOINT ["mlops-platform", "run"]' in text
    assert re.search(r"^FROM python:3\.11-slim-bookworm AS build$", text, re.M)
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignore[0] == "*" and "!src/" in ignore


def test_a_pdb_keeps_one_manager_and_the_metrics_service_selects_them(objs: list[Obj]) -> None:
    [deploy] = of_kind(objs, "Deployment")
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    [pdb] = of_kind(objs, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deploy["spec"]["selector"]
    assert deploy["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    [svc, _] = of_kind(objs, "Service")
    assert svc["metadata"]["name"] == "mlops-platform-metrics"
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert not of_kind(manifests.install_objects(replicas=1), "PodDisruptionBudget")


# -- namespace scoping ------------------------------------------------------------------------------


def test_cluster_mode_order_and_scope(objs: list[Obj]) -> None:
    assert [o["kind"] for o in objs[:2]] == ["Namespace", "CustomResourceDefinition"]
    assert {o["kind"] for o in objs if o["kind"] in CLUSTER_SCOPED} == CLUSTER_SCOPED
    for o in objs:
        assert ("namespace" in o["metadata"]) == (o["kind"] not in CLUSTER_SCOPED), key(o)


CRD_READER_RULES = [
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "resourceNames": ["inferenceservices.mlops.platform"],
        "verbs": ["get", "patch"],
    },
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["list", "watch"],
    },
]


def test_namespaced_mode_has_nothing_cluster_wide_but_the_namespace_crd_and_crd_reader() -> None:
    objs = manifests.install_objects(namespace="ops", watch_namespaces=["team-a"])
    cluster_wide = {o["kind"] for o in objs if "namespace" not in o["metadata"]}
    assert cluster_wide == {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    # cluster-wide, the operator may only read CRDs (to follow optional kinds), nothing else
    assert [r["rules"] for r in of_kind(objs, "ClusterRole")] == [CRD_READER_RULES]
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in of_kind(objs, "Role")}
    assert roles == {("team-a", "mlops-platform-manager"), ("ops", "mlops-platform-leader-election")}
    [deploy] = of_kind(objs, "Deployment")
    [c] = deploy["spec"]["template"]["spec"]["containers"]
    assert "--namespace=team-a" in c["args"] and "--leader-election-namespace=ops" in c["args"]


def test_several_watch_namespaces_get_one_manager_each() -> None:
    objs = manifests.install_objects(watch_namespaces=["team-a", "team-b"])
    by_key(objs)
    assert {o["kind"] for o in objs if "namespace" not in o["metadata"]} == {
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
    }
    assert [r["rules"] for r in of_kind(objs, "ClusterRole")] == [CRD_READER_RULES] * 2
    deploys = of_kind(objs, "Deployment")
    assert [d["metadata"]["name"] for d in deploys] == ["mlops-platform-team-a", "mlops-platform-team-b"]
    election_ids = set()
    for d, ns in zip(deploys, ["team-a", "team-b"], strict=True):
        pod = d["spec"]["template"]["spec"]
        [c] = pod["containers"]
        assert f"--namespace={ns}" in c["args"]
        election_ids |= {a for a in c["args"] if a.startswith("--leader-election-id=")}
        [binding] = [
            b for b in of_kind(objs, "RoleBinding") if b["metadata"]["namespace"] == ns
        ]  # only this manager's ServiceAccount may act in its namespace
        assert binding["subjects"][0]["name"] == pod["serviceAccountName"] == d["metadata"]["name"]
    assert len(election_ids) == 2
    pdb_selectors = [p["spec"]["selector"] for p in of_kind(objs, "PodDisruptionBudget")]
    assert pdb_selectors == [d["spec"]["selector"] for d in deploys]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"replicas": 0}, "replicas"),
        ({"watch_namespaces": []}, "non-empty list"),
        ({"watch_namespaces": "team-a"}, "non-empty list"),
        ({"watch_namespaces": ["a", "a"]}, "duplicate"),
    ],
)
def test_invalid_parameters(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        manifests.install_objects(**kwargs)


# -- the conversion webhook -------------------------------------------------------------------------


def test_every_replica_serves_the_webhook_behind_the_service_the_crd_names(objs: list[Obj]) -> None:
    [deploy] = of_kind(objs, "Deployment")
    assert deploy["spec"]["replicas"] == deploy_defaults.DEFAULT_REPLICAS == 2
    pod_labels = deploy["spec"]["template"]["metadata"]["labels"]
    [c] = deploy["spec"]["template"]["spec"]["containers"]
    assert "--webhook-bind-address=0.0.0.0:9443" in c["args"]
    assert {"name": "webhook", "containerPort": 9443, "protocol": "TCP"} in c["ports"]
    assert not any(a.startswith("--webhook-cert-dir") for a in c["args"])  # self-managed by default
    svc = by_key(objs)[("Service", "mlops-system", "mlops-platform-webhook")]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"] == [
        {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}
    ]
    [crd_obj] = of_kind(objs, "CustomResourceDefinition")
    assert crd_obj == crd.crd_manifest()  # the committed CRD names this Service
    ref = crd_obj["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
    assert (ref["namespace"], ref["name"], ref["port"]) == crd.WEBHOOK_SERVICE
    assert "annotations" not in crd_obj["metadata"]


def test_another_namespace_moves_the_service_the_crd_the_secret_and_the_dns_names() -> None:
    objs = manifests.install_objects(namespace="ops", watch_namespaces=["team-a", "team-b"])
    [crd_obj] = of_kind(objs, "CustomResourceDefinition")
    assert crd_obj["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["namespace"] == "ops"
    assert ("Service", "ops", "mlops-platform-webhook") in by_key(objs)
    for deploy in of_kind(objs, "Deployment"):  # every manager serves it, in the operator namespace
        [c] = deploy["spec"]["template"]["spec"]["containers"]
        assert "--webhook-secret=ops/mlops-platform-webhook-tls" in c["args"]
        assert "--webhook-dns-name=mlops-platform-webhook.ops.svc" in c["args"]


def test_config_webhook_holds_the_service_and_the_pdb() -> None:
    objs = kustomize(ROOT / deploy_defaults.WEBHOOK_DIR)
    assert sorted(key(o) for o in objs) == [
        ("PodDisruptionBudget", "mlops-system", "mlops-platform"),
        ("Service", "mlops-system", "mlops-platform-webhook"),
    ]
    [pdb] = of_kind(objs, "PodDisruptionBudget")
    assert (pdb["apiVersion"], pdb["spec"]["minAvailable"]) == ("policy/v1", 1)
    assert (
        "../webhook"
        in yaml.safe_load((ROOT / deploy_defaults.DEFAULT_DIR / "kustomization.yaml").read_text())[
            "resources"
        ]
    )


def test_the_cert_manager_variant() -> None:
    objs = manifests.install_objects(cert_manager=True)
    plain = by_key(manifests.install_objects())
    got = by_key(objs)
    added = set(got) - set(plain)
    assert added == {
        ("Issuer", "mlops-system", "mlops-platform-selfsigned"),
        ("Certificate", "mlops-system", "mlops-platform-webhook"),
    }
    cert = got[("Certificate", "mlops-system", "mlops-platform-webhook")]
    assert cert["spec"]["dnsNames"] == [
        "mlops-platform-webhook.mlops-system.svc",
        "mlops-platform-webhook.mlops-system.svc.cluster.local",
    ]
    assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": "mlops-platform-selfsigned"}
    [crd_obj] = of_kind(objs, "CustomResourceDefinition")
    assert crd_obj["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "mlops-system/mlops-platform-webhook"
    }
    [deploy] = of_kind(objs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["args"][-1] == f"--webhook-cert-dir={deploy_defaults.CERT_DIR}"
    assert {"name": "webhook-certs", "mountPath": deploy_defaults.CERT_DIR, "readOnly": True} in c[
        "volumeMounts"
    ]
    assert {"name": "webhook-certs", "secret": {"secretName": cert["spec"]["secretName"]}} in pod["volumes"]
    changed = {k for k in plain if plain[k] != got[k]}
    assert changed == {
        ("CustomResourceDefinition", "", crd.CRD_NAME),
        ("Deployment", "mlops-system", "mlops-platform"),
    }


def test_config_cert_manager_is_the_cert_manager_install_set() -> None:
    expected = by_key(manifests.install_objects(cert_manager=True))
    assert by_key(kustomize_patched(ROOT / deploy_defaults.CERT_MANAGER_DIR)) == expected
    kubectl = shutil.which("kubectl")
    if kubectl is not None:  # the real kustomize agrees
        out = subprocess.run(
            [kubectl, "kustomize", str(ROOT / deploy_defaults.CERT_MANAGER_DIR)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert by_key(list(yaml.safe_load_all(out))) == expected


def test_the_chart_renders_the_cert_manager_variant() -> None:
    chart = ROOT / deploy_defaults.CHART_DIR
    assert yaml.safe_load((chart / "values.yaml").read_text())["webhook"] == {
        "certManager": {"enabled": False}
    }
    rendered = helmchart.template(chart, {"webhook": {"certManager": {"enabled": True}}, "namespace": "ops"})
    expected = manifests.install_objects(cert_manager=True, namespace="ops")
    assert _without_crd(rendered) == _without_crd(expected)
    # crds/ is not templated: with Helm the CRD is annotated by hand (docs/install-cert-manager.md)
    [chart_crd] = of_kind(rendered, "CustomResourceDefinition")
    assert "annotations" not in chart_crd["metadata"]


def test_config_local_is_the_install_set_with_the_local_image_on_the_real_node() -> None:
    from mlops_platform.devcluster import binaries
    from mlops_platform.devcluster.realnode import configs, images

    expected = manifests.install_objects(
        image=images.OPERATOR.ref,
        node_selector={"kubernetes.io/os": "linux", **configs.PLACEMENT["nodeSelector"]},
        tolerations=configs.PLACEMENT["tolerations"],
    )
    kubectl = binaries.find(names=("kubectl",))["kubectl"]  # the real kustomize, as users run it
    out = subprocess.run(
        [str(kubectl), "kustomize", str(ROOT / deploy_defaults.LOCAL_DIR)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert by_key(list(yaml.safe_load_all(out))) == by_key(expected)


# -- the activator -----------------------------------------------------------------------------------


def test_a_cluster_wide_install_runs_the_activator_and_the_manager_names_it(objs: list[Obj]) -> None:
    from mlops_platform.deploy import activator

    mine = [o for o in objs if is_activators(o)]
    assert [o["kind"] for o in mine] == [
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service"
    ]  # fmt: skip
    assert {o["metadata"].get("namespace", "mlops-system") for o in mine} == {"mlops-system"}
    assert next(o for o in mine if o["kind"] == "ClusterRole")["rules"] == [r for r, _ in activator.RULES]
    [deploy] = of_kind(objs, "Deployment")
    assert (
        "--activator=mlops-system/mlops-activator"
        in deploy["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    [svc] = [o for o in mine if o["kind"] == "Service"]
    assert {p["name"]: p["port"] for p in svc["spec"]["ports"]} == {"proxy": 8012, "admin": 9091}
    # the activator's Service listens where the activator's flags say, and selects its pod
    [apod] = [o["spec"]["template"] for o in mine if o["kind"] == "Deployment"]
    assert svc["spec"]["selector"].items() <= apod["metadata"]["labels"].items()
    [container] = apod["spec"]["containers"]
    assert (
        "--service=mlops-activator" in container["args"] and "--namespace=mlops-system" in container["args"]
    )


def test_the_activators_pod_meets_the_restricted_profile(objs: list[Obj]) -> None:
    [apod] = [o["spec"]["template"]["spec"] for o in objs if o["kind"] == "Deployment" and is_activators(o)]
    assert apod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert apod["securityContext"]["runAsNonRoot"] is True
    [c] = apod["containers"]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True
    assert "volumes" not in apod and all("hostPort" not in p for p in c["ports"])


def test_namespaced_installs_have_no_activator_and_asking_for_one_is_an_error() -> None:
    objs = manifests.install_objects(watch_namespaces=["team-a"])
    assert not [o for o in objs if is_activators(o)]
    [deploy] = of_kind(objs, "Deployment")
    assert not [a for a in deploy["spec"]["template"]["spec"]["containers"][0]["args"] if "activator" in a]
    with pytest.raises(ValueError, match="activator"):
        manifests.install_objects(watch_namespaces=["team-a"], activator=True)


def test_the_charts_activator_enabled_value() -> None:
    chart = ROOT / deploy_defaults.CHART_DIR
    off = helmchart.template(chart, {"activator": {"enabled": False}, "namespace": "ops"})
    assert _without_crd(off) == _without_crd(manifests.install_objects(namespace="ops", activator=False))
    assert not [o for o in off if is_activators(o)]
