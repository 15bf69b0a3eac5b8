//go:build tools

// Package tools pins the Gateway API implementation of the local cluster built by
// hack/build-control-plane: Traefik v3 with its kubernetesGateway provider (docs/dev-cluster.md).
package tools

import _ "github.com/traefik/traefik/v3/cmd/traefik"
