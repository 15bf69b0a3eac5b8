//go:build tools

// Package tools pins the real worker node's CNI plugins built by hack/build-control-plane: the pod
// network is a bridge with host-local addresses; loopback for each pod's lo; portmap for hostPort.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/containernetworking/plugins/plugins/meta/portmap"
)
