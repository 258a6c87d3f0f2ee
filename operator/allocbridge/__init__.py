"""allocbridge: Nomad's allocations API over Kubernetes Allocation custom resources."""

__version__ = "0.1.0"
