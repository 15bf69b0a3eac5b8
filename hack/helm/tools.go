//go:build tools

// Package tools pins Helm, which lints and renders the operator's chart in `make test` and installs,
// upgrades and uninstalls it in the local cluster's e2e; built by `make binaries` into the tool cache
// (hack/build-control-plane --helm-only).
package tools

import _ "helm.sh/helm/v4/cmd/helm"
