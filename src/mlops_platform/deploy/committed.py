"""The committed generated files (:func:`generated_files`): the kustomize directories
``config/{rbac,manager,webhook,default}``, the ``config/cert-manager`` overlay of them, and the Helm
chart ``charts/mlops-platform``, whose templates are the install set with ``{{ .Values.<name> }}``
where the chart has a value (and one template per certificate mode where the modes differ). Each
file starts with :data:`~mlops_platform.deploy.defaults.HEADER`.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

from mlops_platform import __version__
from mlops_platform.api import crd
from mlops_platform.deploy import activator, builders, defaults, install
from mlops_platform.runtime import generated
from mlops_platform.runtime.objects import Obj

#: the chart's values (name -> default); objects carry _SENTINEL where a template has {{ .Values.name }}
_SENTINEL = "x-helm-value-{}-x"
_HELM_VALUES: dict[str, object] = {
    "namespace": defaults.DEFAULT_NAMESPACE,
    "image": defaults.DEFAULT_IMAGE,
    "replicas": defaults.DEFAULT_REPLICAS,
    **{f"resources.{kind}.{r}": q for kind, rs in defaults.RESOURCES.items() for r, q in rs.items()},
}
#: the chart's values that are YAML blocks (name -> default), the manager pod spec's fields of the same
#: name: ``{{- with .Values.<name> }}`` and ``toYaml``, so an empty one leaves the field out
_HELM_BLOCK_VALUES: dict[str, object] = {"nodeSelector": dict(builders.NODE_SELECTOR), "tolerations": []}
#: a pod spec line ``<field>: <sentinel of a block value>`` (what ``generated.dump`` writes for it)
_HELM_BLOCK_LINE = re.compile(
    r"^( *)(\w+): " + _SENTINEL.format("(" + "|".join(_HELM_BLOCK_VALUES) + ")") + "$", re.MULTILINE
)
#: the chart's switch between the two certificate modes (a template per mode where they differ)
_HELM_CERT_MANAGER = ".Values.webhook.certManager.enabled"


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
    return defaults.HEADER + comment + generated.dump([body])


def _directory(objs: list[Obj], comment: str) -> dict[str, str]:
    counts = collections.Counter(o["kind"] for o in objs)
    files = {_file_name(o, counts[o["kind"]] > 1): defaults.HEADER + generated.dump([o]) for o in objs}
    if len(files) != len(objs):
        raise ValueError("two objects of the same kind in one generated directory")
    return {**files, "kustomization.yaml": _kustomization(list(files), comment)}


def _helm_block(m: re.Match[str]) -> str:
    indent, field, value = m.groups()
    return (
        f"{indent}{{{{- with .Values.{value} }}}}\n"
        f"{indent}{field}:\n"
        f"{indent}  {{{{- toYaml . | nindent {len(indent) + 2} }}}}\n"
        f"{indent}{{{{- end }}}}"
    )


def helm_template(text: str) -> str:
    """Replace the value placeholders of :func:`_chart_objects` with ``{{ .Values.<name> }}`` (a
    block value's line with its field under ``{{- with }}``, the value through ``toYaml``)."""
    text = _HELM_BLOCK_LINE.sub(_helm_block, text)
    for value in _HELM_VALUES:
        text = text.replace(_SENTINEL.format(value), "{{ .Values." + value + " }}")
    if _SENTINEL.partition("{}")[0] in text:
        raise ValueError(f"a value placeholder left in a template: {text}")
    return text


def _chart_objects(*, cert_manager: bool = False) -> list[Obj]:
    resources = {
        k: {r: _SENTINEL.format(f"resources.{k}.{r}") for r in rs} for k, rs in defaults.RESOURCES.items()
    }
    objs = install.install_objects(
        namespace=_SENTINEL.format("namespace"),
        image=_SENTINEL.format("image"),
        cert_manager=cert_manager,
        resources=resources,
    )
    for o in objs:
        if o["kind"] == "Deployment":
            if o["metadata"]["name"] == defaults.NAME:  # the manager's (the activator's: one replica)
                o["spec"]["replicas"] = _SENTINEL.format("replicas")
            pod = o["spec"]["template"]
            # the block values where nodeSelector is (tolerations: none by default, so not in the spec)
            assert "nodeSelector" in pod["spec"] and "tolerations" not in pod["spec"], pod["spec"]
            spec: Obj = {}
            for field, value in pod["spec"].items():
                if field == "nodeSelector":
                    spec.update({b: _SENTINEL.format(b) for b in _HELM_BLOCK_VALUES})
                else:
                    spec[field] = value
            pod["spec"] = spec
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
        body = text.removeprefix(defaults.HEADER)
        if name not in plain:
            out[name] = defaults.HEADER + "{{- if " + _HELM_CERT_MANAGER + " }}\n" + body + "{{- end }}\n"
        elif plain[name] == text:
            out[name] = text
        else:
            default = plain[name].removeprefix(defaults.HEADER)
            out[name] = (
                defaults.HEADER
                + "{{- if " + _HELM_CERT_MANAGER + " }}\n" + body
                + "{{- else }}\n" + default
                + "{{- end }}\n"
            )  # fmt: skip
    return {n: _helm_activator(n, helm_template(t)) for n, t in out.items()}


#: the manager's ``--activator`` argument line in a template
_ACTIVATOR_ARG = re.compile(r"^( *)- --activator=.*$", re.MULTILINE)
_HELM_ACTIVATOR = ".Values.activator.enabled"


def _helm_activator(name: str, text: str) -> str:
    """The activator's templates, and the manager's ``--activator``, only with ``activator.enabled``."""
    if activator.NAME in name:
        body = text.removeprefix(defaults.HEADER)
        return defaults.HEADER + "{{- if " + _HELM_ACTIVATOR + " }}\n" + body + "{{- end }}\n"
    return _ACTIVATOR_ARG.sub(
        lambda m: f"{m[1]}{{{{- if {_HELM_ACTIVATOR} }}}}\n{m[0]}\n{m[1]}{{{{- end }}}}", text
    )


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
        "name": defaults.NAME,
        "description": "The mlops-platform operator: InferenceService (mlops.platform) to a served model.",
        "type": "application",
        "version": __version__,
        "appVersion": __version__,
        "kubeVersion": ">=1.25.0-0",
    }
    values = (
        "# namespace: created by the chart with Pod Security `restricted` labels (install the release\n"
        "#   itself with `--namespace default`, not `--create-namespace`). The CRD (crds/, which Helm\n"
        "#   never templates) names the conversion webhook Service in "
        f"{defaults.DEFAULT_NAMESPACE}: with another\n"
        "#   namespace, install the CRD from `mlops-platform manifests --namespace NAME` instead.\n"
        "# image: the operator image built from the repository's Dockerfile.\n"
        "# replicas: >= 2 (one leader, warm standbys); the PodDisruptionBudget keeps one.\n"
        "# resources: the manager's requests and limits; the memory limit holds 5,000 InferenceServices\n"
        '#   per replica; raise it (or shard, docs/sharding.md) beyond (docs/install.md, "Sizing").\n'
        "# nodeSelector: the manager pods' node labels. Helm merges a map you give into this one: set a\n"
        "#   key to null to drop it (`--set-json 'nodeSelector={\"kubernetes.io/os\":null}'`).\n"
        "# tolerations: the manager pods' tolerations (none by default), e.g. of nodes tainted for them:\n"
        "#   [{key: example.com/operators, operator: Exists, effect: NoSchedule}].\n"
        "# activator.enabled: the activator (one pod), which holds the requests to a model KEDA scaled to\n"
        "#   zero until it has a ready replica, and the manager's --activator (docs/autoscaling.md).\n"
        "#   Without it a request to a model at zero fails until something else scales it up.\n"
        "#   nodeSelector and tolerations place it too.\n"
        "# webhook.certManager.enabled: the conversion webhook's certificate from cert-manager (an Issuer\n"
        "#   and a Certificate) instead of the operator's own; annotate the CRD for cert-manager's CA\n"
        "#   injector yourself (docs/install-cert-manager.md).\n"
        + generated.dump(
            [
                {
                    **_nested(_HELM_VALUES),
                    **_HELM_BLOCK_VALUES,
                    "activator": {"enabled": True},
                    "webhook": {"certManager": {"enabled": False}},
                }
            ]
        )
    )
    files = {
        "Chart.yaml": defaults.HEADER + generated.dump([chart]),
        "values.yaml": defaults.HEADER + values,
        f"crds/{crd.CRD_FILE.name}": crd.render(),
    }
    files.update({f"templates/{n}": text for n, text in _templates().items()})
    return files


def _cert_manager_overlay() -> dict[str, str]:
    """``config/cert-manager``: ``config/default`` with the Issuer and Certificate, the mounted
    Secret and ``--webhook-cert-dir`` on the Deployment, and the CRD annotated for CA injection
    (RFC 6902 patches, so the Deployment's lists are appended to, not replaced)."""
    objs = builders.cert_manager_objects(defaults.DEFAULT_NAMESPACE)
    files = {_file_name(o, False): defaults.HEADER + generated.dump([o]) for o in objs}
    container = "/spec/template/spec/containers/0"
    deployment_ops = [
        *({"op": "add", "path": f"{container}/args/-", "value": a} for a in builders.cert_manager_args()),
        {"op": "add", "path": f"{container}/volumeMounts/-", "value": builders.cert_manager_mount()},
        {"op": "add", "path": "/spec/template/spec/volumes/-", "value": builders.cert_manager_volume()},
    ]
    crd_ops = [
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": builders.ca_injection_annotation(defaults.DEFAULT_NAMESPACE),
        }
    ]
    targets = {
        "deployment_patch.yaml": (
            {"group": "apps", "version": "v1", "kind": "Deployment", "name": defaults.NAME},
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
        files[name] = defaults.HEADER + generated.dump([ops])
    files["kustomization.yaml"] = _kustomization(
        resources,
        "# config/default with the webhook's certificate from cert-manager (installed first):\n"
        "# `kubectl apply --server-side -k config/cert-manager` (docs/install-cert-manager.md).\n",
        patches=[{"path": name, "target": target} for name, (target, _) in targets.items()],
    )
    return files


def _local_overlay() -> dict[str, str]:
    """``config/local``: ``config/default`` for the project's local cluster (docs/install.md, "On
    the local cluster"): the operator image built on the machine (``mlops-platform dev import-image
    mlops-platform``) as the manager's, the storage initializer's and the activator's, the pods on the
    real node (its taint tolerated, its label selected). RFC 6902 patches, built from the Deployments
    themselves."""
    from mlops_platform.devcluster.realnode import configs, images  # the dev cluster's facts

    deployments = {o["metadata"]["name"]: o for o in install.install_objects() if o["kind"] == "Deployment"}
    assert set(deployments) == {defaults.NAME, activator.NAME}, set(deployments)

    def on_the_real_node(deployment: Obj) -> list[Obj]:
        pod = deployment["spec"]["template"]["spec"]
        selector = {**pod["nodeSelector"], **configs.PLACEMENT["nodeSelector"]}
        return [
            {"op": "replace", "path": "/spec/template/spec/nodeSelector", "value": selector},
            {
                "op": "add",
                "path": "/spec/template/spec/tolerations",
                "value": configs.PLACEMENT["tolerations"],
            },
        ]

    manager = deployments[defaults.NAME]
    args = manager["spec"]["template"]["spec"]["containers"][0]["args"]
    (index,) = [i for i, a in enumerate(args) if a.startswith("--storage-initializer-image=")]
    initializer = {
        "op": "replace",
        "path": f"/spec/template/spec/containers/0/args/{index}",
        "value": f"--storage-initializer-image={images.OPERATOR.ref}",
    }
    patches = {
        "deployment_patch.yaml": (defaults.NAME, [initializer, *on_the_real_node(manager)]),
        "activator_patch.yaml": (activator.NAME, on_the_real_node(deployments[activator.NAME])),
    }
    name, _, tag = images.OPERATOR.ref.rpartition(":")
    files = {file: defaults.HEADER + generated.dump([ops]) for file, (_, ops) in patches.items()}
    files["kustomization.yaml"] = _kustomization(
        ["../default"],
        "# config/default on the project's local cluster: the operator image built on this machine,\n"
        "# the pods on the real node: `kubectl apply --server-side -k config/local` (docs/install.md).\n",
        images=[{"name": defaults.DEFAULT_IMAGE.rpartition(":")[0], "newName": name, "newTag": tag}],
        patches=[
            {"path": file, "target": {"group": "apps", "version": "v1", "kind": "Deployment", "name": target}}
            for file, (target, _) in patches.items()
        ],
    )
    return files


def generated_files() -> dict[Path, str]:
    """Every committed generated file (path relative to the checkout) and its content."""
    rbac_dir, manager_dir, webhook_dir = defaults.RBAC_DIR, defaults.MANAGER_DIR, defaults.WEBHOOK_DIR
    objs = [o for o in install.install_objects() if o["kind"] != "CustomResourceDefinition"]  # in config/crd
    activator_dir = defaults.ACTIVATOR_DIR
    by_dir: dict[Path, list[Obj]] = {rbac_dir: [], manager_dir: [], webhook_dir: [], activator_dir: []}
    for o in objs:
        if o["metadata"]["name"] == activator.NAME:
            by_dir[activator_dir].append(o)
        elif "rbac" in o["apiVersion"] or o["kind"] == "ServiceAccount":
            by_dir[rbac_dir].append(o)
        elif o["kind"] == "PodDisruptionBudget" or o["metadata"]["name"] == defaults.WEBHOOK_SERVICE:
            by_dir[webhook_dir].append(o)
        else:
            by_dir[manager_dir].append(o)
    out: dict[Path, str] = {}
    comments = {
        rbac_dir: "# Least-privilege RBAC from the permissions the code declares (runtime.rbac.requires).\n",
        manager_dir: "# The Namespace (Pod Security restricted), Deployment and metrics Service.\n",
        webhook_dir: "# The conversion webhook's Service (every replica) and the PDB keeping one replica.\n",
        activator_dir: "# The activator: it holds requests to a model at zero replicas until one is ready.\n",
    }
    for d, items in by_dir.items():
        out.update({d / n: text for n, text in _directory(items, comments[d]).items()})
    out[defaults.DEFAULT_DIR / "kustomization.yaml"] = _kustomization(
        ["../crd", "../rbac", "../manager", "../webhook", "../activator"],
        f"# The whole install in {defaults.DEFAULT_NAMESPACE}: "
        "`kubectl apply --server-side -k config/default`.\n"
        "# No `namespace:` transformer: the namespace is also in flags and binding subjects, so render\n"
        "# another one with `mlops-platform manifests --namespace NAME` instead.\n",
    )
    out.update({defaults.CERT_MANAGER_DIR / n: text for n, text in _cert_manager_overlay().items()})
    out.update({defaults.LOCAL_DIR / n: text for n, text in _local_overlay().items()})
    out.update({defaults.CHART_DIR / n: text for n, text in _chart().items()})
    return out
