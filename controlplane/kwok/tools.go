//go:build tools

// Package tools pins the upstream kwok main package this module builds.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
