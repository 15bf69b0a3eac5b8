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
import sys
from pathlib import Path

# The module documented as the install set's (``python -m``, ``--help`` prints the docstring above):
# its API is re-exported here; the builders, the constants and the committed files have modules of
# their own (builders, defaults, install, committed).
from mlops_platform.deploy import defaults
from mlops_platform.deploy.committed import generated_files
from mlops_platform.deploy.defaults import DEFAULT_IMAGE
from mlops_platform.deploy.install import install_objects, render
from mlops_platform.runtime import generated

__all__ = ["DEFAULT_IMAGE", "generated_files", "install_objects", "main", "render"]


def main(argv: list[str] | None = None) -> int:
    """CLI: print the install set, ``--write`` the committed files, or ``--check`` them."""
    parser = argparse.ArgumentParser(prog="python -m mlops_platform.deploy.manifests", description=__doc__)
    generated.add_mode_arguments(parser, "config/{rbac,manager,webhook,default,cert-manager} and the chart")
    parser.add_argument("--root", type=Path, help="the checkout (default: the one this module runs from)")
    parser.add_argument("--namespace", default=defaults.DEFAULT_NAMESPACE, help="the operator's namespace")
    parser.add_argument(
        "--watch-namespace", action="append", dest="watch", help="watch only this namespace (repeatable)"
    )
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    parser.add_argument("--replicas", type=int, default=defaults.DEFAULT_REPLICAS)
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
            sys.stdout.write(defaults.HEADER + generated.dump(objs))
        else:
            sys.stdout.write(render(*chosen))
        return 0
    if (
        chosen != (defaults.DEFAULT_NAMESPACE, None, DEFAULT_IMAGE, defaults.DEFAULT_REPLICAS)
        or args.cert_manager
    ):
        parser.error(
            "--write and --check use the defaults: drop --namespace/--watch-namespace/--image/--replicas"
            "/--cert-manager"
        )
    root: Path = args.root or generated.checkout_root("--root")
    return generated.run(args, root, generated_files(), command=parser.prog, owned_dirs=defaults.OWNED_DIRS)


if __name__ == "__main__":
    sys.exit(main())
