"""The only code that talks to Kubernetes: credentials, clients, watches and pod operations.

An import-linter contract (pyproject.toml) keeps kubernetes_asyncio and Kopf's API client out
of every other module; failures leave as `allocbridge.cluster.errors` types, results as plain
JSON dicts (docs/architecture.md, "Layers and boundary contracts").
"""
