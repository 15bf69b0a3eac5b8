//go:build tools

// Package tools pins the local cluster's DNS built by hack/build-control-plane: CoreDNS, run as the
// kube-system Deployment kubeadm and kind run.
package tools

import _ "github.com/coredns/coredns"
