"""Credentials for the Kubernetes API, loaded once and shared by every client of the process.

Kopf runs on a thread and loop of its own (see `allocbridge.app`), so the credentials are kept
as plain values that any loop can turn into a client: a kubernetes_asyncio `Configuration` for
our own calls and a `kopf.ConnectionInfo` for Kopf's login.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import kopf
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config import ConfigException
from kubernetes_asyncio.config.incluster_config import SERVICE_TOKEN_FILENAME

from allocbridge.cluster.plugintokens import PluginTokens, bare_token
from allocbridge.config import KubernetesSettings

#: The settings a kubernetes_asyncio client is built from (server, TLS, token): code above
#: `cluster` hands it back to `cluster`'s functions without importing the client library.
ClientConfiguration = client.Configuration


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to prove who we are."""

    server: str
    ca_path: str | None = None
    insecure: bool = False
    certificate_path: str | None = None
    private_key_path: str | None = None
    token: str | None = None
    token_file: str | None = None  # in a pod: the ServiceAccount token, which the kubelet rotates
    proxy: str | None = None  # the kubeconfig's `proxy-url`
    tls_server_name: str | None = None  # the kubeconfig's: the name the certificate must have
    plugin_tokens: PluginTokens | None = None  # the kubeconfig's exec plugin's, renewed

    def current_token(self) -> str | None:
        """The token to send now: re-read from `token_file` each time, so rotation is seen, or
        the exec plugin's latest."""
        if self.plugin_tokens is not None:
            return self.plugin_tokens.token
        if self.token_file:
            try:
                return Path(self.token_file).read_text().strip() or self.token
            except OSError:
                return self.token
        return self.token

    def configuration(self) -> client.Configuration:
        cfg = client.Configuration(host=self.server)
        cfg.ssl_ca_cert = self.ca_path
        cfg.verify_ssl = not self.insecure
        cfg.cert_file = self.certificate_path
        cfg.key_file = self.private_key_path
        if self.proxy:
            cfg.proxy = self.proxy
        cfg.tls_server_name = self.tls_server_name
        token = self.current_token()
        if token:
            cfg.api_key = {"BearerToken": token}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
        if self.token_file or self.plugin_tokens is not None:
            cfg.refresh_api_key_hook = self._refresh
        return cfg

    def _refresh(self, cfg: client.Configuration) -> None:
        token = self.current_token()
        if token:
            cfg.api_key = {"BearerToken": token}

    def api_client(self, connections: int | None = None) -> client.ApiClient:
        """A new client bound to the calling event loop; close it when done. `connections`:
        at most that many open at once (kubernetes_asyncio's default is 100)."""
        cfg = self.configuration()
        if connections is not None:
            cfg.connection_pool_maxsize = connections
        api = client.ApiClient(configuration=cfg)
        _skip_environment_lookups(api)
        return api

    def kopf_connection(self) -> kopf.ConnectionInfo:
        """Kopf's login; with a rotating token it expires so that Kopf logs in again. Its
        session takes the same proxy as the operator's other clients: the kubeconfig's, else
        the environment's (Kopf reads the environment only when told to), and checks the
        server as the kubeconfig's `tls-server-name` when it has one."""
        expiration = None
        if self.token_file or self.plugin_tokens is not None:
            expiration = datetime.datetime.now(datetime.UTC) + TOKEN_RELOAD
            if self.plugin_tokens is not None:  # and no later than the plugin's token ends
                expiration = min(expiration, self.plugin_tokens.expiry)
        login = kopf.ConnectionInfo(
            server=self.server,
            ca_path=self.ca_path,
            insecure=self.insecure,
            certificate_path=self.certificate_path,
            private_key_path=self.private_key_path,
            token=self.current_token(),
            expiration=expiration,
            proxy_url=self.proxy,
            trust_env=_environment_names_a_proxy(),
        )
        if self.tls_server_name:
            fields = {f.name: getattr(login, f.name) for f in dataclasses.fields(login)}
            return _KopfConnectionNamingServer(tls_server_name=self.tls_server_name, **fields)
        return login


class ServerNameContext(ssl.SSLContext):
    """A client TLS context that checks the server's certificate against `server_name` (and
    sends it as SNI) whatever address the connection was opened to: a kubeconfig's
    `tls-server-name`. aiohttp's callers can pass such a name per request; Kopf cannot, it
    only takes a context, so the name goes into the context. Event loops wrap their TLS
    connections through `wrap_bio` (asyncio's and uvloop's TLS layers alike)."""

    server_name: str | None = None

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return super().wrap_bio(
            incoming, outgoing, server_side, self.server_name or server_hostname, session
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class _KopfConnectionNamingServer(kopf.ConnectionInfo):
    """Kopf's login for a kubeconfig with `tls-server-name`: the same fields, and a context
    that checks the server as that name (Kopf's own context checks the URL's host)."""

    tls_server_name: str

    def as_ssl_context(self) -> ssl.SSLContext:
        context = ServerNameContext(ssl.PROTOCOL_TLS_CLIENT)
        context.server_name = self.tls_server_name
        if self.ca_path:
            context.load_verify_locations(cafile=self.ca_path)
        else:
            context.load_default_certs()
        if self.certificate_path and self.private_key_path:
            context.load_cert_chain(self.certificate_path, self.private_key_path)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


TOKEN_RELOAD = datetime.timedelta(minutes=5)  # how long Kopf keeps a rotating token

_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "ws_proxy", "wss_proxy")


def _environment_names_a_proxy() -> bool:
    """Whether a proxy variable (either case) is set, as aiohttp's `trust_env` would read."""
    return any(os.environ.get(name) or os.environ.get(name.upper()) for name in _PROXY_VARIABLES)


def _skip_environment_lookups(api: client.ApiClient) -> None:
    """Turn off the proxy and `.netrc` lookups kubernetes_asyncio's session makes per request.

    Its aiohttp session is built with `trust_env=True`, which reads the proxy variables and
    stats `~/.netrc` on every request: a measurable share of the reconciler's CPU when
    hundreds of allocations start at once. When no proxy variable is set there is nothing to
    find (the credentials never come from `.netrc`), so the lookups go; with one set they
    stay, and the proxy is honoured as before.
    """
    if _environment_names_a_proxy():
        return
    session = getattr(getattr(api, "rest_client", None), "pool_manager", None)
    if session is not None and hasattr(session, "_trust_env"):
        session._trust_env = False


class CredentialsError(Exception):
    """No usable kubeconfig and not running in a cluster."""


async def load_credentials(settings: KubernetesSettings) -> Credentials:
    """The kubeconfig named in the settings, else $KUBECONFIG or ~/.kube/config, else in-cluster."""
    cfg = client.Configuration()
    token_file: str | None = None
    kubeconfig = settings.kubeconfig or os.environ.get("KUBECONFIG")
    default = Path.home() / ".kube" / "config"
    plugin_tokens = None
    try:
        if kubeconfig or default.exists():
            loader = await config.load_kube_config(
                config_file=kubeconfig or str(default),
                context=settings.context,
                client_configuration=cfg,
                persist_config=False,
            )
            plugin_tokens = PluginTokens.of(loader)
        else:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
            token_file = SERVICE_TOKEN_FILENAME
    except (ConfigException, OSError) as exc:
        raise CredentialsError(f"cannot load Kubernetes credentials: {exc}") from exc
    if not cfg.host:
        raise CredentialsError("the kubeconfig names no API server")
    authorization = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    token = bare_token(authorization) if authorization else None
    return Credentials(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert,
        insecure=not cfg.verify_ssl,
        certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
        token=token,
        token_file=token_file,
        proxy=cfg.proxy or None,
        tls_server_name=cfg.tls_server_name or None,
        plugin_tokens=plugin_tokens,
    )
