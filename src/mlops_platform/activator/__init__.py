"""The activator (in progress, not wired yet: docs/design.md, "Wake from zero without a mesh"): a
shared HTTP proxy that is in a Service's data path only while its model is scaled to zero, holds
requests for a bounded time while KEDA wakes the model, and forwards them once an endpoint is ready."""
