"""Credentials: a rotating ServiceAccount token file is re-read, not cached forever; the
kubeconfig's proxy is kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from allocbridge.cluster.connection import Credentials, load_credentials
from allocbridge.config import KubernetesSettings


async def test_rotated_token_file_is_used(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    credentials = Credentials(server="https://127.0.0.1:1", token="first", token_file=str(token))
    cfg = credentials.configuration()
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer first"
    token.write_text("second\n")
    assert await cfg.get_api_key_with_prefix("BearerToken") == "Bearer second"
    login = credentials.kopf_connection()
    assert login.token == "second" and login.expiration is not None


async def test_fixed_token_without_file(tmp_path: Path) -> None:
    credentials = Credentials(server="https://127.0.0.1:1", token="fixed")
    assert credentials.kopf_connection().expiration is None
    assert await credentials.configuration().get_api_key_with_prefix("BearerToken") == (
        "Bearer fixed"
    )


def _kubeconfig(folder: Path, proxy_url: str | None) -> Path:
    cluster = {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}
    if proxy_url:
        cluster["proxy-url"] = proxy_url
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = folder / "kubeconfig"
    path.write_text(json.dumps(document))  # JSON is YAML
    return path


async def test_the_kubeconfigs_proxy_reaches_every_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's `proxy-url` is kept: the kubernetes_asyncio clients (watches, requests,
    exec, logs) and Kopf's session all go through it."""
    for name in _PROXY_NAMES:
        monkeypatch.delenv(name, raising=False)
    path = _kubeconfig(tmp_path, "http://127.0.0.1:3128")
    credentials = await load_credentials(KubernetesSettings(kubeconfig=str(path)))
    assert credentials.proxy == "http://127.0.0.1:3128"
    assert credentials.configuration().proxy == "http://127.0.0.1:3128"
    login = credentials.kopf_connection()
    assert (login.proxy_url, login.trust_env) == ("http://127.0.0.1:3128", False)


async def test_without_a_proxy_url_kopf_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No `proxy-url`: no proxy of our own, and Kopf reads the proxy variables exactly when one
    is set, as the operator's kubernetes_asyncio clients do."""
    for name in _PROXY_NAMES:
        monkeypatch.delenv(name, raising=False)
    credentials = await load_credentials(
        KubernetesSettings(kubeconfig=str(_kubeconfig(tmp_path, None)))
    )
    assert credentials.proxy is None and credentials.configuration().proxy is None
    assert credentials.kopf_connection().trust_env is False
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert credentials.kopf_connection().trust_env is True


_PROXY_NAMES = [
    spelling
    for name in ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy")
    for spelling in (name, name.upper())
]
