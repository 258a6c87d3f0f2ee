# allocbridge's configuration in the cluster (kustomize turns it into the ConfigMap
# allocbridge-config-<hash>, so a change here rolls the Deployment).
#
# Every replica gets this file with its own `priority` (the Deployment's init container
# replaces the number below: higher for older pods, with random low digits): Kopf peering lets
# only the replica with the highest priority reconcile, and replicas with equal priorities would
# all pause.

controller {
  name = "allocbridge"
  # /health turns 503 at the first SIGTERM while the API keeps serving for this long, so the
  # Service and any load balancer stop sending requests before the listener closes.
  graceful_shutdown_wait_duration = "10s"
}

listener "tcp" {
  purpose     = "api"
  address     = "0.0.0.0:4646"
  tls_disable = true # plain HTTP inside the cluster; see docs/operations.md for TLS
}

listener "tcp" {
  purpose     = "ops"
  address     = "0.0.0.0:9203"
  tls_disable = true
}

kubernetes {
  # No kubeconfig: the pod's ServiceAccount (in-cluster configuration). No namespaces: all.
  peering    = "allocbridge" # the ClusterKopfPeering the replicas meet in (created if missing)
  priority   = 0             # replaced per pod by the init container
  standalone = false
}

acl {
  enabled = true
}

log {
  format = "json"
  level  = "info"
}
