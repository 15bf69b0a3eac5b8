//go:build tools

// Package tools pins promtool (github.com/prometheus/prometheus/cmd/promtool), built by
// hack/build-control-plane to check and unit-test the generated PrometheusRule groups.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
