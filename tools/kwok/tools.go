//go:build tools

// Package tools pins the command this module builds; `go build` takes it by import path.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
