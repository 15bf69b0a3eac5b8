"""Control: controllers (builder, workers, predicates, reconcile results), the manager (sync, probes,
metrics, shutdown), Lease leader election, and the generic owned-child sync. The top layer."""
