//go:build tools

// Package tools pins Helm, which installs the operator's chart in the local cluster's e2e (issue
// #40; not built by make yet).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
