"""Generic pieces of a Kubernetes webhook served over self-managed TLS.

- ``certs``: CA and serving certificates, CA bundles and the pure rotation planner;
- ``keeper``: the certificates in one Secret shared by replicas (or mounted files), the bundle
  injected where clients read it (e.g. a CRD's conversion webhook ``caBundle``);
- ``server``: the HTTPS endpoint with hot certificate swap and controller-runtime's webhook metrics.

See docs/webhook-tls.md.
"""
