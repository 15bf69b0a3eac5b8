//go:build tools

// Package tools pins what hack/vulncheck runs: govulncheck, and the Go vulnerability database as a
// module (golang.org/x/vulndb's data/osv), indexed offline by its own cmd/indexdb: this machine
// cannot reach the database's web address.
package tools

import (
	_ "golang.org/x/vuln/cmd/govulncheck"
	_ "golang.org/x/vulndb/cmd/indexdb"
)
