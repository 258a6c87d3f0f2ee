"""What the renewal of an exec plugin's token does when the plugin fails or gives nothing newer
(cluster/plugintokens.py). The plugin runs behind a stand-in for kubernetes_asyncio's loader;
the real plugin, loader and API server are in tests/cluster/test_plugin_tokens.py."""

from __future__ import annotations

import asyncio
import datetime
import logging

import pytest

from allocbridge.cluster import plugintokens
from allocbridge.cluster.plugintokens import RENEW_BEFORE, PluginTokens

NOW = datetime.datetime.now(datetime.UTC)


class Loader:
    """Runs of the plugin: each either raises or sets the token and expiry it is given."""

    def __init__(self, *runs: tuple[str, datetime.datetime] | Exception) -> None:
        self.token = "Bearer first"
        self.exec_plugin_expiry = NOW + RENEW_BEFORE - datetime.timedelta(seconds=5)  # due
        self.runs = list(runs)

    async def load_from_exec_plugin(self) -> bool:
        run = self.runs.pop(0)
        if isinstance(run, Exception):
            raise run
        self.token, self.exec_plugin_expiry = f"Bearer {run[0]}", run[1]
        return True


async def renewed(tokens: PluginTokens, token: str) -> None:
    task = asyncio.create_task(tokens.keep_fresh())
    try:
        for _ in range(200):
            if tokens.token == token:
                return
            await asyncio.sleep(0.01)
        pytest.fail(f"still {tokens.token!r}, not {token!r}")
    finally:
        task.cancel()


def test_only_a_plugin_token_with_an_end_is_renewed() -> None:
    assert PluginTokens.of(object()) is None  # no plugin ran
    without_end = Loader()
    without_end.exec_plugin_expiry = None  # type: ignore[assignment]
    assert PluginTokens.of(without_end) is None
    tokens = PluginTokens.of(Loader())
    assert tokens is not None and tokens.token == "first"


async def test_a_failed_run_keeps_the_token_warns_and_is_tried_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(plugintokens, "RETRY", (0.01,))
    later = NOW + datetime.timedelta(hours=1)
    loader = Loader(RuntimeError("exec: process returned 1"), ("second", later))
    tokens = PluginTokens(loader)
    with caplog.at_level(logging.WARNING, logger=plugintokens.__name__):
        await renewed(tokens, "second")
    assert (tokens.token, tokens.expiry) == ("second", later)
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "the kubeconfig's exec plugin gave no new token"
    ]


async def test_a_run_that_gives_no_later_end_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plugintokens, "RETRY", (0.01,))
    stale = NOW + RENEW_BEFORE - datetime.timedelta(seconds=5)
    later = NOW + datetime.timedelta(hours=1)
    tokens = PluginTokens(Loader(("stale", stale), ("second", later)))
    await renewed(tokens, "second")
    assert (tokens.token, tokens.expiry) == ("second", later)
