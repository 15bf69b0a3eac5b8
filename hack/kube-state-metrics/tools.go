//go:build tools

// Package tools pins kube-state-metrics, built by hack/build-monitoring for the local cluster's
// monitoring stack (mlops_platform.devcluster.monitoring): the replica alerts read its series.
package tools

import (
	_ "k8s.io/kube-state-metrics/v2"
)
