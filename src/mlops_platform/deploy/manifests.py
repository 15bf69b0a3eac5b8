"""The full install set, built in Python: the single source of ``config/``, the Helm chart and
``mlops-platform manifests``.

- :func:`install_objects`: the Namespace (Pod Security ``restricted``: enforce, audit and warn), the
  CRD (:func:`mlops_platform.api.crd.crd_manifest`), the RBAC (:func:`mlops_platform.deploy.rbac.objects`),
  the manager Deployment (leader-elected replicas, restricted security context), its
  PodDisruptionBudget, the metrics Service and the conversion webhook's Service, in apply order.
- The model servers' storage initializer runs the operator's own image: the manager gets
  ``--storage-initializer-image=<the image>`` (the chart: ``{{ .Values.image }}``).
- The conversion webhook: every replica serves it on :data:`WEBHOOK_PORT` (``--webhook-bind-address``),
  behind the Service the CRD names (``crd.WEBHOOK_SERVICE``, in the operator's namespace); the PDB
  keeps one replica, so a drain never leaves the CRD without its converter. Certificates: by default
  self-managed by the operator (a Secret, the CA bundle injected into the CRD); with
  ``cert_manager=True`` a cert-manager Issuer and Certificate, the Secret mounted at
  :data:`CERT_DIR` (``--webhook-cert-dir``) and the CRD annotated for cert-manager's CA injector
  (docs/install-cert-manager.md).
- Namespace scoping: ``watch_namespaces=None`` watches the whole cluster (ClusterRole); a list gets
  a Role per watched namespace and ``--namespace``. The manager watches ONE namespace per process
  (``runtime.manager.Options.namespace``), so a list of several gives one manager (ServiceAccount,
  RBAC, Deployment, PDB) per watched namespace.
- :func:`render` is the multi-document YAML; :func:`generated_files` the committed files
  (``config/rbac``, ``config/manager``, ``config/webhook``, ``config/default``, the
  ``config/cert-manager`` overlay of it, ``charts/mlops-platform`` with the value
  ``webhook.certManager.enabled``).
- ``python -m mlops_platform.deploy.manifests`` prints the install set; ``--write`` / ``--check`` the
  committed files (exit 1 with a diff when one differs or is stale: :mod:`~mlops_platform.runtime.generated`).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from mlops_platform import __version__
from mlops_platform.api import crd
from mlops_platform.deploy import rbac
from mlops_platform.runtime import generated
from mlops_platform.runtime.control import manager
from mlops_platform.runtime.objects import Obj
from mlops_platform.webhooks import serve

__all__ = ["DEFAULT_IMAGE", "generated_files", "install_objects", "main", "render"]

NAME = rbac.NAME
DEFAULT_NAMESPACE = rbac.DEFAULT_NAMESPACE
DEFAULT_IMAGE = f"{NAME}:{__version__}"
DEFAULT_REPLICAS = 2
LEADER_ELECTION_ID = f"{NAME}-operator"
#: Pod Security Standards version the namespace labels pin (the Kubernetes minor the project tests on)
POD_SECURITY_VERSION = "v1.36"
UID = 65532
METRICS_PORT = 8080
HEALTH_PORT = 8081
#: the readiness probe: ``/readyz`` (caches synced). The operator runs with
#: ``--no-readiness-requires-leadership``: were readiness tied to leadership, a standby would never be
#: Ready, a rolling update would wait forever for it and the PDB would block evicting the leader.
READINESS_PATH = "/readyz"
#: more than the manager's graceful shutdown (drain reconciles, release the Lease)
TERMINATION_GRACE_SECONDS = int(manager.Options.graceful_shutdown_timeout) + 15
WATCH_NAMESPACE_LABEL = "mlops.platform/watch-namespace"
#: the manager's CPU and memory (the chart's ``resources``), sized from the scale benchmark with every
#: child kind on (docs/benchmarks/scale-operator-memory.md; docs/install.md, "Sizing"): RSS 147 MiB at
#: 1,000 InferenceServices and 369 MiB at 5,000 (about 55 MiB per 1,000), so the request is the RSS
#: of 5,000 per replica and the limit twice it; the CPU limit is one core, which the single Python
#: thread never outgrows (a lower one throttles the initial sync of thousands of objects)
RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "100m", "memory": "384Mi"},
    "limits": {"cpu": "1000m", "memory": "768Mi"},
}
WEBHOOK_PORT = 9443
WEBHOOK_SERVICE = crd.WEBHOOK_SERVICE[1]
WEBHOOK_SECRET = serve.SECRET[1]
#: cert-manager mode: the Issuer, the Certificate, its Secret and where the Secret is mounted
ISSUER = f"{NAME}-selfsigned"
CERTIFICATE = f"{NAME}-webhook"
CERT_SECRET = f"{NAME}-webhook-cert"
CERT_DIR = "/etc/mlops-platform/webhook-certs"
CERT_VOLUME = "webhook-certs"
CA_INJECTION_ANNOTATION = "cert-manager.io/inject-ca-from"

RBAC_DIR = Path("config/rbac")
MANAGER_DIR = Path("config/manager")
WEBHOOK_DIR = Path("config/webhook")
DEFAULT_DIR = Path("config/default")
CERT_MANAGER_DIR = Path("config/cert-manager")
CHART_DIR = Path("charts/mlops-platform")
#: directories whose every ``*.yaml`` is generated (stale ones are reported and removed)
OWNED_DIRS = (
    RBAC_DIR,
    MANAGER_DIR,
    WEBHOOK_DIR,
    CERT_MANAGER_DIR,
    CHART_DIR / "templates",
    CHART_DIR / "crds",
)
HEADER = "# Generated by `python -m mlops_platform.deploy.manifests --write`. Do not edit.\n"
#: the chart's values (name -> default); objects carry _SENTINEL where a template has {{ .Values.name }}
_SENTINEL = "x-helm-value-{}-x"
_HELM_VALUES: dict[str, object] = {
    "namespace": DEFAULT_NAMESPACE,
    "image": DEFAULT_IMAGE,
    "replicas": DEFAULT_REPLICAS,
    **{f"resources.{kind}.{r}": q for kind, rs in RESOURCES.items() for r, q in rs.items()},
}
#: the chart's switch between the two certificate modes (a template per mode where they differ)
_HELM_CERT_MANAGER = ".Values.webhook.certManager.enabled"


def namespace_object(name: str) -> Obj:
    """The operator's Namespace, with Pod Security ``restricted`` enforced, audited and warned."""
    labels = rbac.labels("namespace")
    for mode in ("enforce", "audit", "warn"):
        labels[f"pod-security.kubernetes.io/{mode}"] = "restricted"
        labels[f"pod-security.kubernetes.io/{mode}-version"] = POD_SECURITY_VERSION
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _selector(watch: str | None, several: bool) -> dict[str, str]:
    sel = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "manager"}
    if several and watch is not None:
        sel[WATCH_NAMESPACE_LABEL] = watch
    return sel


def _args(namespace: str, watch: str | None, election_id: str, cert_manager: bool, image: str) -> list[str]:
    args = [
        "--leader-elect",
        f"--leader-election-namespace={namespace}",
        f"--leader-election-id={election_id}",
        f"--health-probe-bind-address=0.0.0.0:{HEALTH_PORT}",
        f"--metrics-bind-address=0.0.0.0:{METRICS_PORT}",
        "--no-readiness-requires-leadership",
        # every replica converts: the API server reaches them through the webhook Service
        f"--webhook-bind-address=0.0.0.0:{WEBHOOK_PORT}",
        f"--webhook-secret={namespace}/{WEBHOOK_SECRET}",
        *(f"--webhook-dns-name={n}" for n in serve.service_dns_names(namespace, WEBHOOK_SERVICE)),
        # the model servers' storage initializer runs this very image (python -m mlops_platform.storage)
        f"--storage-initializer-image={image}",
    ]
    if watch is not None:
        args.append(f"--namespace={watch}")
    return [*args, *_cert_manager_args()] if cert_manager else args


def _cert_manager_args() -> list[str]:
    return [f"--webhook-cert-dir={CERT_DIR}"]


def _cert_manager_mount() -> Obj:
    return {"name": CERT_VOLUME, "mountPath": CERT_DIR, "readOnly": True}


def _cert_manager_volume() -> Obj:
    return {"name": CERT_VOLUME, "secret": {"secretName": CERT_SECRET}}


def _container(
    args: list[str], image: str, cert_manager: bool, resources: Mapping[str, Mapping[str, str]]
) -> Obj:
    def probe(path: str, period: int, failures: int) -> Obj:
        return {
            "httpGet": {"path": path, "port": "health"},
            "periodSeconds": period,
            "timeoutSeconds": 5,
            "failureThreshold": failures,
        }

    return {
        "name": "manager",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["mlops-platform", "run"],
        "args": args,
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "ports": [
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
            {"name": "health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
            {"name": "webhook", "containerPort": WEBHOOK_PORT, "protocol": "TCP"},
        ],
        "startupProbe": probe("/healthz", 2, 30),
        "livenessProbe": probe("/healthz", 20, 3),
        "readinessProbe": probe(READINESS_PATH, 10, 3),
        "resources": {kind: dict(quantities) for kind, quantities in resources.items()},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "privileged": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            *([_cert_manager_mount()] if cert_manager else []),
        ],
    }


def pod_template(
    *, service_account: str, selector: dict[str, str], container: Obj, cert_manager: bool = False
) -> Obj:
    """The manager's pod template (restricted profile, spread across nodes and zones)."""
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
        for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone")
    ]
    return {
        "metadata": {"labels": {**rbac.labels("manager"), **selector}},
        "spec": {
            "serviceAccountName": service_account,
            "automountServiceAccountToken": True,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": UID,
                "runAsGroup": UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
            "volumes": [
                {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                *([_cert_manager_volume()] if cert_manager else []),
            ],
            "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "topologySpreadConstraints": spread,
        },
    }


def deployment(
    *,
    name: str,
    namespace: str,
    watch: str | None,
    several: bool,
    image: str,
    replicas: int,
    cert_manager: bool,
    resources: Mapping[str, Mapping[str, str]],
) -> Obj:
    """One manager Deployment; ``maxSurge: 0`` keeps at most ``replicas`` pods (see docs/install.md)."""
    selector = _selector(watch, several)
    election_id = f"{LEADER_ELECTION_ID}-{watch}" if several else LEADER_ELECTION_ID
    args = _args(namespace, watch, election_id, cert_manager, image)
    container = _container(args, image, cert_manager, resources)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": {**rbac.labels("manager"), **selector}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
            "template": pod_template(
                service_account=name, selector=selector, container=container, cert_manager=cert_manager
            ),
        },
    }


def pod_disruption_budget(*, name: str, namespace: str, selector: dict[str, str]) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "labels": rbac.labels("manager")},
        "spec": {
            "minAvailable": 1,
            "selector": {"matchLabels": selector},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def metrics_service(namespace: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{NAME}-metrics", "namespace": namespace, "labels": rbac.labels("metrics")},
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(None, False),
            "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"}],
        },
    }


def webhook_service(namespace: str) -> Obj:
    """The Service the CRD's conversion webhook names: every manager pod, leader or not, behind it."""
    port = crd.WEBHOOK_SERVICE[2]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": WEBHOOK_SERVICE, "namespace": namespace, "labels": rbac.labels("webhook")},
        "spec": {
            "type": "ClusterIP",
            "selector": _selector(None, False),
            "ports": [{"name": "webhook", "port": port, "targetPort": "webhook", "protocol": "TCP"}],
        },
    }


def crd_object(namespace: str, *, cert_manager: bool = False) -> Obj:
    """The CRD, its conversion webhook at the Service in ``namespace``; with cert-manager, annotated
    for its CA injector (the operator then injects nothing)."""
    obj = crd.crd_manifest()
    obj["spec"]["conversion"] = crd.conversion(service=(namespace, *crd.WEBHOOK_SERVICE[1:]))
    if cert_manager:
        obj["metadata"]["annotations"] = _ca_injection_annotation(namespace)
    return obj


def _ca_injection_annotation(namespace: str) -> dict[str, str]:
    return {CA_INJECTION_ANNOTATION: f"{namespace}/{CERTIFICATE}"}


def cert_manager_objects(namespace: str) -> list[Obj]:
    """A self-signed Issuer and the webhook's serving Certificate (the Service's DNS names)."""
    meta = {"namespace": namespace, "labels": rbac.labels("webhook")}
    return [
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"name": ISSUER, **meta},
            "spec": {"selfSigned": {}},
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {"name": CERTIFICATE, **meta},
            "spec": {
                "dnsNames": list(serve.service_dns_names(namespace, WEBHOOK_SERVICE)),
                "issuerRef": {"kind": "Issuer", "name": ISSUER},
                "secretName": CERT_SECRET,
                "privateKey": {"rotationPolicy": "Always"},
            },
        },
    ]


def _managers(watch_namespaces: Sequence[str] | None) -> tuple[list[tuple[str, str | None]], bool]:
    """(Deployment name, watched namespace) of each manager, and whether there are several."""
    if watch_namespaces is None:
        return [(NAME, None)], False
    if isinstance(watch_namespaces, str) or not watch_namespaces:
        raise ValueError(f"watch_namespaces must be a non-empty list (None: all), not {watch_namespaces!r}")
    if len(set(watch_namespaces)) != len(watch_namespaces):
        raise ValueError(f"duplicate watch namespaces: {list(watch_namespaces)}")
    if len(watch_namespaces) == 1:
        return [(NAME, watch_namespaces[0])], False
    return [(f"{NAME}-{ns}", ns) for ns in watch_namespaces], True


def install_objects(
    *,
    namespace: str = DEFAULT_NAMESPACE,
    watch_namespaces: Sequence[str] | None = None,
    image: str = DEFAULT_IMAGE,
    replicas: int = DEFAULT_REPLICAS,
    cert_manager: bool = False,
    resources: Mapping[str, Mapping[str, str]] = RESOURCES,
) -> list[Obj]:
    """Everything an install needs, in apply order (Namespace and CRD first).

    A PodDisruptionBudget (``minAvailable: 1``) comes with each manager when ``replicas >= 2``: with
    one replica it would forbid every voluntary eviction. ``cert_manager``: the webhook's
    certificate from cert-manager (which must be installed) instead of the operator's own.
    ``resources``: the manager container's requests and limits (:data:`RESOURCES`).
    """
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, not {replicas}")
    managers, several = _managers(watch_namespaces)
    out: list[Obj] = [namespace_object(namespace), crd_object(namespace, cert_manager=cert_manager)]
    for name, watch in managers:
        out += rbac.objects(
            namespace=namespace,
            watch_namespaces=None if watch is None else [watch],
            service_account=name,
            name=name,
        )
    if cert_manager:
        out += cert_manager_objects(namespace)
    for name, watch in managers:
        out.append(
            deployment(
                name=name,
                namespace=namespace,
                watch=watch,
                several=several,
                image=image,
                replicas=replicas,
                cert_manager=cert_manager,
                resources=resources,
            )
        )
        if replicas >= 2:
            out.append(
                pod_disruption_budget(name=name, namespace=namespace, selector=_selector(watch, several))
            )
    out += [metrics_service(namespace), webhook_service(namespace)]
    return out


def render(
    namespace: str = DEFAULT_NAMESPACE,
    watch_namespaces: Sequence[str] | None = None,
    image: str = DEFAULT_IMAGE,
    replicas: int = DEFAULT_REPLICAS,
) -> str:
    """The install set as multi-document YAML, for ``kubectl apply --server-side -f -``."""
    objs = install_objects(
        namespace=namespace, watch_namespaces=watch_namespaces, image=image, replicas=replicas
    )
    return HEADER + generated.dump(objs)


# -- committed files -------------------------------------------------------------------------------


def _file_name(obj: Obj, repeated: bool) -> str:
    """``cluster_role.yaml``; with several objects of the kind ``cluster_role_<name>.yaml``."""
    kind = re.sub(r"(?<!^)(?=[A-Z])", "_", obj["kind"]).lower()
    return f"{kind}_{obj['metadata']['name']}.yaml" if repeated else f"{kind}.yaml"


def _kustomization(resources: list[str], comment: str, **fields: object) -> str:
    body = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": resources,
        **fields,
    }
    return HEADER + comment + generated.dump([body])


def _directory(objs: list[Obj], comment: str) -> dict[str, str]:
    counts = collections.Counter(o["kind"] for o in objs)
    files = {_file_name(o, counts[o["kind"]] > 1): HEADER + generated.dump([o]) for o in objs}
    if len(files) != len(objs):
        raise ValueError("two objects of the same kind in one generated directory")
    return {**files, "kustomization.yaml": _kustomization(list(files), comment)}


def helm_template(text: str) -> str:
    """Replace the value placeholders of :func:`_chart_objects` with ``{{ .Values.<name> }}``."""
    for value in _HELM_VALUES:
        text = text.replace(_SENTINEL.format(value), "{{ .Values." + value + " }}")
    return text


def _chart_objects(*, cert_manager: bool = False) -> list[Obj]:
    resources = {k: {r: _SENTINEL.format(f"resources.{k}.{r}") for r in rs} for k, rs in RESOURCES.items()}
    objs = install_objects(
        namespace=_SENTINEL.format("namespace"),
        image=_SENTINEL.format("image"),
        cert_manager=cert_manager,
        resources=resources,
    )
    for o in objs:
        if o["kind"] == "Deployment":
            o["spec"]["replicas"] = _SENTINEL.format("replicas")
    return [o for o in objs if o["kind"] != "CustomResourceDefinition"]


def _templates() -> dict[str, str]:
    """The chart's templates: one per object; where the certificate modes differ, the template
    renders the one ``webhook.certManager.enabled`` chooses (cert-manager's objects only with it)."""
    plain, with_cm = (_directory(_chart_objects(cert_manager=cm), "") for cm in (False, True))
    del plain["kustomization.yaml"], with_cm["kustomization.yaml"]
    if not set(plain) <= set(with_cm):
        raise ValueError("cert-manager mode drops an object")
    out: dict[str, str] = {}
    for name, text in with_cm.items():
        body = text.removeprefix(HEADER)
        if name not in plain:
            out[name] = HEADER + "{{- if " + _HELM_CERT_MANAGER + " }}\n" + body + "{{- end }}\n"
        elif plain[name] == text:
            out[name] = text
        else:
            default = plain[name].removeprefix(HEADER)
            out[name] = (
                HEADER
                + "{{- if " + _HELM_CERT_MANAGER + " }}\n" + body
                + "{{- else }}\n" + default
                + "{{- end }}\n"
            )  # fmt: skip
    return {n: helm_template(t) for n, t in out.items()}


def _nested(flat: dict[str, object]) -> dict[str, object]:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}`` (the chart's values.yaml from :data:`_HELM_VALUES`)."""
    out: dict[str, object] = {}
    for dotted, value in flat.items():
        *parents, leaf = dotted.split(".")
        node = out
        for part in parents:
            child = node.setdefault(part, {})
            assert isinstance(child, dict)
            node = child
        node[leaf] = value
    return out


def _chart() -> dict[str, str]:
    chart = {
        "apiVersion": "v2",
        "name": NAME,
        "description": "The mlops-platform operator: InferenceService (mlops.platform) to a served model.",
        "type": "application",
        "version": __version__,
        "appVersion": __version__,
        "kubeVersion": ">=1.25.0-0",
    }
    values = (
        "# namespace: created by the chart with Pod Security `restricted` labels (install the release\n"
        "#   itself with `--namespace default`, not `--create-namespace`). The CRD (crds/, which Helm\n"
        f"#   never templates) names the conversion webhook Service in {DEFAULT_NAMESPACE}: with another\n"
        "#   namespace, install the CRD from `mlops-platform manifests --namespace NAME` instead.\n"
        "# image: the operator image built from the repository's Dockerfile.\n"
        "# replicas: >= 2 (one leader, warm standbys); the PodDisruptionBudget keeps one.\n"
        "# resources: the manager's requests and limits; the memory limit holds 5,000 InferenceServices\n"
        '#   per replica; raise it (or shard, docs/sharding.md) beyond (docs/install.md, "Sizing").\n'
        "# webhook.certManager.enabled: the conversion webhook's certificate from cert-manager (an Issuer\n"
        "#   and a Certificate) instead of the operator's own; annotate the CRD for cert-manager's CA\n"
        "#   injector yourself (docs/install-cert-manager.md).\n"
        + generated.dump([{**_nested(_HELM_VALUES), "webhook": {"certManager": {"enabled": False}}}])
    )
    files = {
        "Chart.yaml": HEADER + generated.dump([chart]),
        "values.yaml": HEADER + values,
        f"crds/{crd.CRD_FILE.name}": crd.render(),
    }
    files.update({f"templates/{n}": text for n, text in _templates().items()})
    return files


def _cert_manager_overlay() -> dict[str, str]:
    """``config/cert-manager``: ``config/default`` with the Issuer and Certificate, the mounted
    Secret and ``--webhook-cert-dir`` on the Deployment, and the CRD annotated for CA injection
    (RFC 6902 patches, so the Deployment's lists are appended to, not replaced)."""
    objs = cert_manager_objects(DEFAULT_NAMESPACE)
    files = {_file_name(o, False): HEADER + generated.dump([o]) for o in objs}
    container = "/spec/template/spec/containers/0"
    deployment_ops = [
        *({"op": "add", "path": f"{container}/args/-", "value": a} for a in _cert_manager_args()),
        {"op": "add", "path": f"{container}/volumeMounts/-", "value": _cert_manager_mount()},
        {"op": "add", "path": "/spec/template/spec/volumes/-", "value": _cert_manager_volume()},
    ]
    crd_ops = [
        {"op": "add", "path": "/metadata/annotations", "value": _ca_injection_annotation(DEFAULT_NAMESPACE)}
    ]
    targets = {
        "deployment_patch.yaml": (
            {"group": "apps", "version": "v1", "kind": "Deployment", "name": NAME},
            deployment_ops,
        ),
        "crd_patch.yaml": (
            {
                "group": "apiextensions.k8s.io",
                "version": "v1",
                "kind": "CustomResourceDefinition",
                "name": crd.CRD_NAME,
            },
            crd_ops,
        ),
    }
    resources = ["../default", *files]
    for name, (_, ops) in targets.items():
        files[name] = HEADER + generated.dump([ops])
    files["kustomization.yaml"] = _kustomization(
        resources,
        "# config/default with the webhook's certificate from cert-manager (installed first):\n"
        "# `kubectl apply --server-side -k config/cert-manager` (docs/install-cert-manager.md).\n",
        patches=[{"path": name, "target": target} for name, (target, _) in targets.items()],
    )
    return files


def generated_files() -> dict[Path, str]:
    """Every committed generated file (path relative to the checkout) and its content."""
    objs = [o for o in install_objects() if o["kind"] != "CustomResourceDefinition"]  # in config/crd
    by_dir: dict[Path, list[Obj]] = {RBAC_DIR: [], MANAGER_DIR: [], WEBHOOK_DIR: []}
    for o in objs:
        if "rbac" in o["apiVersion"] or o["kind"] == "ServiceAccount":
            by_dir[RBAC_DIR].append(o)
        elif o["kind"] == "PodDisruptionBudget" or o["metadata"]["name"] == WEBHOOK_SERVICE:
            by_dir[WEBHOOK_DIR].append(o)
        else:
            by_dir[MANAGER_DIR].append(o)
    out: dict[Path, str] = {}
    comments = {
        RBAC_DIR: "# Least-privilege RBAC from the permissions the code declares (runtime.rbac.requires).\n",
        MANAGER_DIR: "# The Namespace (Pod Security restricted), Deployment and metrics Service.\n",
        WEBHOOK_DIR: "# The conversion webhook's Service (every replica) and the PDB keeping one replica.\n",
    }
    for d, items in by_dir.items():
        out.update({d / n: text for n, text in _directory(items, comments[d]).items()})
    out[DEFAULT_DIR / "kustomization.yaml"] = _kustomization(
        ["../crd", "../rbac", "../manager", "../webhook"],
        f"# The whole install in {DEFAULT_NAMESPACE}: `kubectl apply --server-side -k config/default`.\n"
        "# No `namespace:` transformer: the namespace is also in flags and binding subjects, so render\n"
        "# another one with `mlops-platform manifests --namespace NAME` instead.\n",
    )
    out.update({CERT_MANAGER_DIR / n: text for n, text in _cert_manager_overlay().items()})
    out.update({CHART_DIR / n: text for n, text in _chart().items()})
    return out


def main(argv: list[str] | None = None) -> int:
    """CLI: print the install set, ``--write`` the committed files, or ``--check`` them."""
    parser = argparse.ArgumentParser(prog="python -m mlops_platform.deploy.manifests", description=__doc__)
    generated.add_mode_arguments(parser, "config/{rbac,manager,webhook,default,cert-manager} and the chart")
    parser.add_argument("--root", type=Path, help="the checkout (default: the one this module runs from)")
    parser.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="the operator's namespace")
    parser.add_argument(
        "--watch-namespace", action="append", dest="watch", help="watch only this namespace (repeatable)"
    )
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    parser.add_argument("--replicas", type=int, default=DEFAULT_REPLICAS)
    parser.add_argument(
        "--cert-manager", action="store_true", help="the webhook's certificate from cert-manager"
    )
    args = parser.parse_args(argv)
    chosen = (args.namespace, args.watch, args.image, args.replicas)
    if not (args.write or args.check):
        if args.cert_manager:
            objs = install_objects(
                namespace=args.namespace,
                watch_namespaces=args.watch,
                image=args.image,
                replicas=args.replicas,
                cert_manager=True,
            )
            sys.stdout.write(HEADER + generated.dump(objs))
        else:
            sys.stdout.write(render(*chosen))
        return 0
    if chosen != (DEFAULT_NAMESPACE, None, DEFAULT_IMAGE, DEFAULT_REPLICAS) or args.cert_manager:
        parser.error(
            "--write and --check use the defaults: drop --namespace/--watch-namespace/--image/--replicas"
            "/--cert-manager"
        )
    root: Path = args.root or generated.checkout_root("--root")
    return generated.run(args, root, generated_files(), command=parser.prog, owned_dirs=OWNED_DIRS)


if __name__ == "__main__":
    sys.exit(main())
