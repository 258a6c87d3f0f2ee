"""Credentials: a rotating ServiceAccount token file is re-read, not cached forever."""

from __future__ import annotations

from pathlib import Path

from allocbridge.cluster.connection import Credentials


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
