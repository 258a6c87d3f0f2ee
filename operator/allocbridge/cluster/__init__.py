"""The only code that talks to Kubernetes: credentials, clients, watches and pod operations."""
