//go:build tools

// Package tools pins the real worker node's NetworkPolicy agent built by hack/build-control-plane:
// kube-router, run with only its network-policy controller (docs/dev-cluster.md).
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
