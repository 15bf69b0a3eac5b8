"""Generic pieces of a Kubernetes webhook served over self-managed TLS.

- ``certs``: CA and serving certificates, CA bundles and the pure rotation planner;
- ``keeper``: the certificates in one Secret shared by replicas (or mounted files), the bundle
  injected where clients read it (e.g. a CRD's conversion webhook ``caBundle``);
- ``server``: the HTTPS endpoint with hot certificate swap and controller-runtime's webhook metrics,
  on ``listener`` (accepts its own connections), ``connection`` (HTTP/1.1 on h11, one per accepted
  connection) and ``drain`` (a stopping server fails no request).

See docs/webhook-tls.md.
"""
