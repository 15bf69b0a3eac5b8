"""Transport: talking to the API server (REST client, built-in resources, CRD install) and serving
HTTP (probes, metrics). The lowest layer: it imports only the runtime's utility modules."""
