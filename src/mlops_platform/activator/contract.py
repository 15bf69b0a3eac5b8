"""What the operator and the activator agree on (constants only: both import it).

- the operator labels a predictor Service :data:`PARKED_KEY`\\ =\\ :data:`PARKED_VALUE` while its
  KEDA-scaled model has no available replica and an activator is configured, and annotates it with
  the activator's Service (:data:`SERVICE_ANNOTATION`); the EndpointSlice controller copies the label
  onto the Service's own slices, which the activator watches;
- the activator's Service ``NAMESPACE/NAME`` (the operator's ``--activator``) has the port
  :data:`PROXY_PORT_NAME` (:data:`PROXY_PORT`) that parked Services' traffic reaches, and its pods
  serve ``GET /v1/held/NS/SERVICE`` on :data:`ADMIN_PORT` (``{"held": N}``): KEDA's second trigger.
"""

PARKED_KEY = "mlops.platform/activator"
PARKED_VALUE = "parked"
#: on a parked Service, the activator's Service ``NAMESPACE/NAME``: a client that goes through the
#: API server (``mlops-platform infer``) sends there instead, with the Host of the parked Service; the
#: API server's service proxy only reaches pods of the Service's own namespace, never the activator
SERVICE_ANNOTATION = "mlops.platform/activator-service"
PROXY_PORT_NAME = "proxy"
PROXY_PORT = 8012
ADMIN_PORT = 9091


def held_url(activator: str, namespace: str, service: str) -> str:
    """The held-requests URL of ``namespace/service`` at the activator Service ``activator``
    (``NAMESPACE/NAME``), as KEDA's ``metrics-api`` trigger reads it."""
    ns, name = activator.split("/", 1)
    return f"http://{name}.{ns}.svc:{ADMIN_PORT}/v1/held/{namespace}/{service}"
