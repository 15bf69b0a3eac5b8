"""How a component's model reaches its server, per scheme of its model URI
(:mod:`mlops_platform.api.modeluri`; ``docs/model-delivery.md``): the predictor pod's model volume,
the ``storage-initializer`` init container that fills it for ``s3``/``gs``/``http(s)`` (the operator's
image, ``python -m mlops_platform.storage fetch``, the storage Secret mounted into it alone), the
claim for ``pvc``, nothing for ``file``; and what a live Deployment's initializer fetches with
(:func:`fetch_options`), which a canary that stays as it is keeps.
"""

from __future__ import annotations

import dataclasses

from mlops_platform.api import internal, modeluri
from mlops_platform.controllers.inferenceservice import servers
from mlops_platform.controllers.inferenceservice.children import base

MODEL_VOLUME = "model-store"
#: the init container that fetches a remote model into the model volume (``docs/model-delivery.md``)
STORAGE_INITIALIZER = "storage-initializer"
#: where the storage Secret is mounted in the initializer (``--credentials``), and its volume
CREDENTIALS_DIR = "/var/run/secrets/mlops.platform/storage"
CREDENTIALS_VOLUME = "storage-credentials"
#: the initializer's scratch space (its root filesystem is read-only)
SCRATCH_VOLUME = "storage-scratch"
SCRATCH_DIR = "/tmp"
#: the Secret's files: read-only, and readable by any uid, so the initializer reads them whichever
#: non-root uid the pod runs as (no fsGroup, which would also chown the model volume)
CREDENTIALS_MODE = 0o444
#: the initializer's uid when the runtime would run it as root (the operator image's USER)
STORAGE_INITIALIZER_UID = 65532
#: The initializer streams the artifact in bounded chunks (obstore), so its memory does not grow with
#: the model: a modest request, and a limit that bounds a misbehaving download at 512 MiB (Python,
#: obstore's buffers, an archive's decompression window) instead of letting it press the node. No
#: CPU limit: it would only slow the download, and nothing else of the pod runs meanwhile. Init
#: containers' requests do not add to the pod's: its effective request is the larger of the two.
STORAGE_INITIALIZER_REQUESTS = {"cpu": "100m", "memory": "128Mi"}
STORAGE_INITIALIZER_LIMITS = {"memory": "512Mi"}


@dataclasses.dataclass(frozen=True, slots=True)
class Wiring:
    """How the component's model reaches the server: its pod's volumes and init containers, the
    server's mount of the model, and the model directory the server is pointed at."""

    model_dir: str
    volumes: tuple[base.Obj, ...] = ()
    mounts: tuple[base.Obj, ...] = ()
    init_containers: tuple[base.Obj, ...] = ()


def wiring(target: base.Target, rt: servers.ServingRuntime, ctx: base.BuildContext) -> Wiring:
    """The wiring of the component's model URI, per scheme (see the module doc). A URI the parser
    refuses goes to the initializer, which refuses it with the parser's message: the pod then says
    ``ModelDownloadFailed`` instead of serving nothing (the API versions reject it first)."""
    uri = target.component.model_uri
    try:
        parsed: modeluri.ModelURI | None = modeluri.parse(uri)
    except modeluri.ModelURIError:
        parsed = None
    if parsed is not None and parsed.scheme == "file":
        return Wiring(parsed.path)
    if parsed is not None and parsed.scheme == "pvc":
        volume = {
            "name": MODEL_VOLUME,
            "persistentVolumeClaim": {"claimName": parsed.location, "readOnly": True},
        }
        mount: base.Obj = {"name": MODEL_VOLUME, "mountPath": rt.model_dir, "readOnly": True}
        if parsed.path:
            mount["subPath"] = parsed.path
        return Wiring(rt.model_dir, (volume,), (mount,))
    storage = target.component.storage
    volumes: list[base.Obj] = [
        {"name": MODEL_VOLUME, "emptyDir": {}},
        {"name": SCRATCH_VOLUME, "emptyDir": {}},
    ]
    if storage.secret_name:
        volumes.append(
            {
                "name": CREDENTIALS_VOLUME,
                "secret": {"secretName": storage.secret_name, "defaultMode": CREDENTIALS_MODE},
            }
        )
    mount = {"name": MODEL_VOLUME, "mountPath": rt.model_dir, "readOnly": True}
    return Wiring(rt.model_dir, tuple(volumes), (mount,), (_storage_initializer(target, rt, ctx),))


def _storage_initializer(target: base.Target, rt: servers.ServingRuntime, ctx: base.BuildContext) -> base.Obj:
    """``python -m mlops_platform.storage fetch URI DIR ...`` (the contract: ``docs/model-delivery.md``)
    under the restricted Pod Security profile; its one-line failure is its termination message."""
    component, storage = target.component, target.component.storage
    args = ["fetch", component.model_uri, rt.model_dir, "--layout", rt.model_layout]
    args += ["--name", target.isvc.name]
    for flag, value in (
        ("--format", component.model_format),
        ("--sha256", component.model_sha256),
        ("--credentials", CREDENTIALS_DIR if storage.secret_name else None),
        ("--endpoint", storage.endpoint),
        ("--region", storage.region),
    ):
        if value:
            args += [flag, value]
    mounts: list[base.Obj] = [
        {"name": MODEL_VOLUME, "mountPath": rt.model_dir},
        {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_DIR},
    ]
    if storage.secret_name:
        mounts.append({"name": CREDENTIALS_VOLUME, "mountPath": CREDENTIALS_DIR, "readOnly": True})
    security: base.Obj = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if rt.run_as_user == 0:  # a runtime run as root: the initializer still is not
        security["runAsUser"] = STORAGE_INITIALIZER_UID
    return {
        "name": STORAGE_INITIALIZER,
        "image": ctx.storage_initializer_image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "mlops_platform.storage"],
        "args": args,
        "resources": {
            "requests": dict(STORAGE_INITIALIZER_REQUESTS),
            "limits": dict(STORAGE_INITIALIZER_LIMITS),
        },
        "securityContext": security,
        "volumeMounts": mounts,
        # the initializer writes its one-line failure there; never its logs (they may be long)
        "terminationMessagePolicy": "File",
    }


def fetch_options(deployment: base.Obj) -> tuple[str | None, str | None, internal.ModelStorage]:
    """The ``--sha256``, ``--format`` and storage (its Secret, ``--endpoint``, ``--region``) a live
    Deployment's storage initializer fetches with (None, None, no storage without one): what a
    canary that stays as it is keeps."""
    template = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in template.get("initContainers") or ():
        if container.get("name") != STORAGE_INITIALIZER:
            continue
        args = [str(a) for a in container.get("args") or ()]
        flags = ("--sha256", "--format", "--endpoint", "--region")
        found = {flag: args[i + 1] for i, flag in enumerate(args[:-1]) if flag in flags}
        secret = next(
            (
                str((v.get("secret") or {}).get("secretName"))
                for v in template.get("volumes") or ()
                if v.get("name") == CREDENTIALS_VOLUME and (v.get("secret") or {}).get("secretName")
            ),
            None,
        )
        storage = internal.ModelStorage(secret, found.get("--endpoint"), found.get("--region"))
        return found.get("--sha256"), found.get("--format"), storage
    return None, None, internal.ModelStorage()
