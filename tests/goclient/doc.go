// Package goclient drives allocbridge's /v1 API with the official Nomad Go client,
// github.com/hashicorp/nomad/api, configured the way the nomad CLI configures it:
// api.DefaultConfig() reads NOMAD_ADDR, NOMAD_NAMESPACE and NOMAD_TOKEN.
//
// The tests are steps of tests/cluster/test_go_client.py, which prepares allocations on the
// local control plane, runs one step at a time with `go test -run`, and checks what the step
// did to the pods. Each step reads its inputs from GOCLIENT_* environment variables and skips
// when they are absent, so a bare `go test ./...` here compiles everything and runs nothing.
package goclient
