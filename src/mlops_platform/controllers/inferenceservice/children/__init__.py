"""One module per child kind, each a pure ``build(isvc, ctx) -> dict | None``.

Every module exposes the same three functions (``name``, ``build``, ``condition``) bundled as a
:class:`base.Child` named ``CHILD``; :data:`CHILDREN` lists them in apply order: the Deployment
first (pods take longest), then the Service in front of it, then the HPA that scales it.
"""

from mlops_platform.controllers.inferenceservice.children import base, deployment, hpa, service

CHILDREN: tuple[base.Child, ...] = (deployment.CHILD, service.CHILD, hpa.CHILD)

__all__ = ["CHILDREN", "base", "deployment", "hpa", "service"]
