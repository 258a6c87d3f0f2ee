"""A kubeconfig whose user is an exec plugin, as EKS's, GKE's and AKS's are: the operator's
clients and Kopf's login send the plugin's token, and the renewed one once it is due.

The plugin here hands out ServiceAccount tokens of the session cluster: the first with an
`expirationTimestamp` that makes it due for renewal a few seconds later, then another
ServiceAccount's, so the API server itself tells (SelfSubjectReview) which token a request sent.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from running_operator import Operator, http, install

from allocbridge.cluster.connection import load_credentials
from allocbridge.config import KubernetesSettings
from allocbridge_localcluster.kubectl import eventually

PLUGIN = """
import datetime, json, pathlib, sys
runs_file, tokens_file = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
runs = (int(runs_file.read_text()) if runs_file.exists() else 0) + 1
runs_file.write_text(str(runs))
tokens = json.loads(tokens_file.read_text())
# The first token is due (five minutes before its end) three seconds from now; the next is not.
token, seconds = (tokens[0], 303) if runs == 1 else (tokens[1], 3600)
end = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
status = {"token": token, "expirationTimestamp": end.strftime("%Y-%m-%dT%H:%M:%SZ")}
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": status}))
"""


def _plugin_kubeconfig(admin: Path, folder: Path, tokens: list[str]) -> tuple[Path, Path]:
    """A kubeconfig for the admin kubeconfig's cluster whose user runs the plugin; and the file
    that counts the plugin's runs."""
    (folder / "plugin.py").write_text(PLUGIN)
    (folder / "tokens.json").write_text(json.dumps(tokens))
    runs = folder / "runs"
    document = yaml.safe_load(admin.read_text())
    exec_user = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(folder / "plugin.py"), str(runs), str(folder / "tokens.json")],
        "interactiveMode": "Never",
    }
    document["users"] = [{"name": "plugin", "user": {"exec": exec_user}}]
    for context in document["contexts"]:
        context["context"]["user"] = "plugin"
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(document))
    return kubeconfig, runs


async def _who(api: client.ApiClient) -> str:
    review = await client.AuthenticationV1Api(api).create_self_subject_review(
        client.V1SelfSubjectReview()
    )
    return str(review.status.user_info.username)


async def test_an_exec_plugins_token_is_sent_and_renewed_when_due(
    kubectl: Any, cluster: Any, namespace: str, tmp_path: Path
) -> None:
    tokens = []
    for account in ("plugin-a", "plugin-b"):
        kubectl("create", "serviceaccount", account, "-n", namespace)
        tokens.append(
            kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
        )
    kubeconfig, runs = _plugin_kubeconfig(cluster.kubeconfig, tmp_path, tokens)
    credentials = await load_credentials(KubernetesSettings(kubeconfig=str(kubeconfig)))
    renewal = credentials.plugin_tokens
    assert renewal is not None and runs.read_text() == "1"

    async with credentials.api_client() as api:  # made before the renewal, used after it too
        assert await _who(api) == f"system:serviceaccount:{namespace}:plugin-a"
        first = credentials.kopf_connection()
        assert first.token == tokens[0]
        assert first.expiration is not None and first.expiration <= renewal.expiry

        task = asyncio.create_task(renewal.keep_fresh())
        try:
            for _ in range(150):  # due in about 4 s; 30 s at most
                if renewal.token == tokens[1]:
                    break
                await asyncio.sleep(0.2)
            else:
                pytest.fail(f"the plugin ran {runs.read_text()} time(s) in 30 s, not twice")
            assert await _who(api) == f"system:serviceaccount:{namespace}:plugin-b"
            assert credentials.kopf_connection().token == tokens[1]
            await asyncio.sleep(2)  # the next token is not due for 55 minutes: no third run
            assert runs.read_text() == "2"
        finally:
            task.cancel()


def test_a_replica_renews_its_plugins_token_when_due(
    kubectl: Any, cluster: Any, namespace: str, tmp_path: Path
) -> None:
    """The whole process: its upstream monitor runs the renewal, and it keeps serving."""
    install(kubectl)
    token = kubectl(
        "create", "token", "allocbridge", "-n", "allocbridge-system", "--duration=1h"
    ).stdout.strip()
    kubeconfig, runs = _plugin_kubeconfig(cluster.kubeconfig, tmp_path, [token, token])
    replica = Operator(tmp_path, kubeconfig, namespaces=(namespace,)).start()
    try:
        eventually(lambda: runs.read_text() == "2", timeout=30, what="the plugin's second run")
        status, body, _ = http(f"{replica.api}/v1/allocations?namespace={namespace}")
        assert (status, json.loads(body)) == (200, [])
        assert replica.ready()
    finally:
        replica.stop()
    assert "renewed the exec plugin's token" in replica.log.read_text(errors="replace")
