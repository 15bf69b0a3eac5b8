"""Observability: Events (events.k8s.io with series and a spam filter), JSON logs, Prometheus
metrics with controller-runtime's names."""
