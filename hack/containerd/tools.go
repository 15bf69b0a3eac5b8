//go:build tools

// Package tools pins the real worker node's container runtime built by hack/build-control-plane:
// containerd, its runc shim and ctr (the image import tool).
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
