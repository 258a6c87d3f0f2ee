"""The Nomad-compatible `/v1` HTTP API."""
