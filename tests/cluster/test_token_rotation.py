"""A rotated ServiceAccount token file changes who the operator is to the API server."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from allocbridge.cluster.connection import Credentials
from allocbridge.cluster.resources import raw_json

pytestmark = pytest.mark.cluster


def admin_cluster(kubeconfig: Path) -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load(kubeconfig.read_bytes())["clusters"][0]["cluster"]
    return found


async def test_rotated_token_file_changes_the_identity(
    cluster: Any, kubectl: Any, namespace: str, tmp_path: Path
) -> None:
    for account in ("first", "second"):
        kubectl("create", "serviceaccount", account, "-n", namespace)
    admin = admin_cluster(Path(cluster.kubeconfig))
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(admin["certificate-authority-data"]))
    token_file = tmp_path / "token"

    def mint(account: str) -> str:
        return str(kubectl("create", "token", account, "-n", namespace).stdout.strip())

    token_file.write_text(mint("first"))
    credentials = Credentials(server=admin["server"], ca_path=str(ca), token_file=str(token_file))

    async def who() -> str:
        async with credentials.api_client() as api:
            review = await raw_json(
                api.call_api(
                    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                    "POST",
                    body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
                    header_params={"Content-Type": "application/json"},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _return_http_data_only=True,
                )
            )
        return str(review["status"]["userInfo"]["username"])

    assert await who() == f"system:serviceaccount:{namespace}:first"
    token_file.write_text(mint("second"))
    assert await who() == f"system:serviceaccount:{namespace}:second"
