//go:build tools

// Package tools pins KEDA's operator and metrics API server (the external metrics adapter), built by
// hack/build-monitoring for the local cluster's autoscaling (mlops_platform.devcluster.keda).
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
