//go:build tools

// Package tools pins the kwok commands built by hack/build-control-plane.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
