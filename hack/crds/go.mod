// Pinned third-party CRD sources. Nothing here is compiled: mlops_platform.devcluster.crds runs
// `go mod download -json MODULE` in this directory (verified against go.sum) and installs the CRD
// YAML files that each upstream module ships. Do not run `go mod tidy` here (it would drop them).
module mlops.platform/hack/crds

go 1.26.0

require (
	github.com/cert-manager/cert-manager v1.21.2
	github.com/kedacore/keda/v2 v2.21.0
	github.com/prometheus-operator/prometheus-operator v0.93.1
	istio.io/api v1.32.0
	sigs.k8s.io/gateway-api v1.6.3
)
