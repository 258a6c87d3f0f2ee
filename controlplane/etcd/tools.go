//go:build tools

// Package tools pins the upstream etcd main package this module builds.
package tools

import _ "go.etcd.io/etcd/server/v3"
