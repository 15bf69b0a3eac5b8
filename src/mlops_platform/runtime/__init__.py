"""Generic controller runtime (client-go/controller-runtime semantics). Imports nothing else of mlops_platform."""
