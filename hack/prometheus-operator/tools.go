//go:build tools

// Package tools pins the Prometheus Operator and its config reloader, built by hack/build-monitoring
// for the local cluster's monitoring stack (mlops_platform.devcluster.monitoring).
package tools

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
	_ "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
)
