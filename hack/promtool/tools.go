//go:build tools

// Package tools pins promtool and Prometheus (github.com/prometheus/prometheus): hack/build-control-plane
// builds promtool to check and unit-test the generated PrometheusRule groups, hack/build-monitoring
// builds Prometheus, of the same release, for the local cluster's monitoring stack.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
