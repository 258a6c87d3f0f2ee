"""The ops listener: `/health` for load balancers and probes, `/metrics` for Prometheus."""
