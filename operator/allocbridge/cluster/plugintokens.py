"""Tokens from a kubeconfig's exec plugin (EKS's, GKE's and AKS's kubeconfigs use one), renewed.

kubernetes_asyncio runs the user's `exec` plugin once, when the kubeconfig is loaded, and leaves
running it again to its caller: a process that kept that first token would lose the API server
when it expires (15 minutes on EKS, an hour on GKE). `PluginTokens.keep_fresh` runs the plugin
again when the library counts the token as expired, five minutes before its
`expirationTimestamp`, so a new token is in hand before the old one ends; every client of the
process reads `token` when it sends a request (`Credentials.current_token`), so the new one is
used from then on, and Kopf logs in again by then.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from kubernetes_asyncio.config.kube_config import EXPIRY_SKEW_PREVENTION_DELAY

log = logging.getLogger(__name__)

#: How early kubernetes_asyncio counts a plugin's token as expired, and runs the plugin again.
RENEW_BEFORE = EXPIRY_SKEW_PREVENTION_DELAY
#: Waits after a failed run of the plugin, then the last one again and again.
RETRY = (5.0, 15.0, 30.0)


class PluginTokens:
    """The current token of a kubeconfig user's exec plugin, and the task that renews it.

    `loader` is the `KubeConfigLoader` that loaded the kubeconfig (the plugin has run once).
    """

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self.token = bare_token(loader.token)
        self.expiry: datetime.datetime = loader.exec_plugin_expiry

    @classmethod
    def of(cls, loader: Any) -> PluginTokens | None:
        """Tokens to renew when the kubeconfig's plugin gave one with an expiry; else None (no
        plugin, a client certificate, or a token without an end that needs no renewal)."""
        has_end = getattr(loader, "exec_plugin_expiry", None) is not None
        return cls(loader) if has_end and getattr(loader, "token", None) else None

    def renew_at(self) -> datetime.datetime:
        """When the current token is due for renewal."""
        return self.expiry - RENEW_BEFORE

    async def keep_fresh(self) -> None:
        """Renew the token each time it is due, for as long as the task runs."""
        failures = 0
        while True:
            if failures:
                wait = RETRY[min(failures, len(RETRY)) - 1]
            else:  # a second past the moment the library counts it as expired, so it runs
                wait = (self.renew_at() - _now()).total_seconds() + 1.0
            await asyncio.sleep(max(wait, 0.0))
            try:
                await self._loader.load_from_exec_plugin()
                expiry = self._loader.exec_plugin_expiry
                if expiry <= self.expiry:
                    raise ValueError(f"its token expires no later than the last ({expiry})")
            except Exception as exc:  # the plugin's own failure: logged, tried again
                failures += 1
                log.warning(
                    "the kubeconfig's exec plugin gave no new token; the current one expires at %s",
                    self.expiry.isoformat(),
                    extra={"error": str(exc) or repr(exc)},
                )
                continue
            failures = 0
            self.token = bare_token(self._loader.token)
            self.expiry = expiry
            log.info("renewed the exec plugin's token", extra={"expires": expiry.isoformat()})


def bare_token(authorization: str) -> str:
    """The token of an `Authorization` value (`Bearer <token>`), as kubernetes_asyncio keeps it."""
    return authorization.removeprefix("Bearer ").strip()


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
