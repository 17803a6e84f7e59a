"""OAuth 2.1 for MCP servers, through the MCP SDK's own OAuth support (``mcp.client.auth``).

A server's ``auth`` section (``MCPAuthConfig``) picks one of three grants; the SDK does the rest:
protected-resource and authorization-server metadata discovery, dynamic client registration when
no ``client_id`` is given, PKCE, the RFC 8707 ``resource`` parameter, scope selection and step-up,
and refreshing the access token when it expires.

* ``client_credentials`` (``client_id`` + ``client_secret``): a service account; no person, the
  flow for training jobs (the SDK's ``ClientCredentialsOAuthProvider``).
* ``refresh_token`` (``refresh_token``, with the ``client_id`` it was issued to): a person signed
  in once, elsewhere; the job redeems the refresh token at the token endpoint it discovers and
  keeps refreshing (``RefreshTokenOAuthProvider``).
* ``authorization_code``: the browser flow, done without a browser: the client requests the
  authorization URL itself and takes the code from the redirect. That works where the
  authorization server grants without a person (pre-consented clients, test and internal servers);
  one that shows a sign-in page is a clear error naming the two grants above.

Tokens live in memory only (``MemoryTokenStorage``), shared by the episodes of a process (one
provider per server and credentials: ``oauth_provider``), and every token and secret is registered
for masking (``aworld_core.secrets``): nothing of it reaches argv, plan files or logs. Secrets in
the config may be ``{"env": NAME}`` references, as everywhere.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Literal
from urllib.parse import parse_qs, urlparse

from pydantic import BaseModel, ConfigDict, Field, model_validator

from aworld_core.secrets import register_secret

logger = logging.getLogger(__name__)

Grant = Literal["client_credentials", "refresh_token", "authorization_code"]
DEFAULT_REDIRECT_URI = "http://127.0.0.1:33418/callback"
SECRET_FIELDS = ("client_secret", "refresh_token")


class MCPAuthConfig(BaseModel):
    """The ``auth`` section of one MCP server: how this client gets its access token."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["oauth"] = "oauth"
    grant: Grant = Field(description="client_credentials, refresh_token or authorization_code (see mcp_auth).")
    client_id: str | None = Field(default=None, description="Pre-registered client; none: dynamic registration.")
    client_secret: str | None = Field(default=None, repr=False)
    refresh_token: str | None = Field(default=None, repr=False)
    scope: str | None = Field(default=None, description="Space-separated scopes; none: what the server asks for.")
    issuer: str | None = Field(default=None, description="The authorization server the credentials belong to.")
    token_endpoint_auth_method: Literal["client_secret_basic", "client_secret_post", "none"] | None = None
    redirect_uri: str = Field(default=DEFAULT_REDIRECT_URI, description="authorization_code only.")
    client_name: str = "aworld-core"

    @model_validator(mode="after")
    def _complete(self) -> MCPAuthConfig:
        if self.grant == "client_credentials" and not (self.client_id and self.client_secret):
            raise ValueError("grant 'client_credentials' needs client_id and client_secret")
        if self.grant == "refresh_token" and not (self.refresh_token and self.client_id):
            raise ValueError(
                "grant 'refresh_token' needs refresh_token and the client_id it was issued to "
                "(and client_secret for a confidential client)"
            )
        if self.grant != "refresh_token" and self.refresh_token:
            raise ValueError(f"refresh_token is for grant 'refresh_token', not {self.grant!r}")
        if self.client_secret and not self.client_id:
            raise ValueError("client_secret without client_id: give both, or neither (dynamic registration)")
        for value in (self.client_secret, self.refresh_token):
            register_secret(value)
        return self

    def auth_method(self) -> str:
        if self.token_endpoint_auth_method:
            return self.token_endpoint_auth_method
        return "client_secret_basic" if self.client_secret else "none"


class MemoryTokenStorage:
    """The SDK's ``TokenStorage`` in memory; each token is masked in logs from the moment it arrives."""

    def __init__(self, client_info: Any = None):
        self.tokens: Any = None
        self.client_info = client_info

    async def get_tokens(self) -> Any:
        return self.tokens

    async def set_tokens(self, tokens: Any) -> None:
        register_secret(tokens.access_token)
        register_secret(tokens.refresh_token)
        self.tokens = tokens

    async def get_client_info(self) -> Any:
        return self.client_info

    async def set_client_info(self, client_info: Any) -> None:
        register_secret(client_info.client_secret)
        self.client_info = client_info


class HeadlessAuthorization:
    """The authorization-code grant's two hooks without a browser: ``redirect`` requests the
    authorization URL itself (no redirect followed); ``callback`` hands the SDK the code from the
    ``Location`` the server answered with."""

    def __init__(self, redirect_uri: str, verify: Any):
        self.redirect_uri = redirect_uri
        self.verify = verify
        self._result: Any = None

    async def redirect(self, authorization_url: str) -> None:
        import httpx2
        from mcp.client.auth import OAuthFlowError
        from mcp.shared.auth import AuthorizationCodeResult

        async with httpx2.AsyncClient(follow_redirects=False, timeout=30, verify=self.verify) as http:
            response = await http.get(authorization_url)
        location = response.headers.get("location", "")
        query = parse_qs(urlparse(location).query)
        if response.is_redirect and location.startswith(self.redirect_uri) and query.get("code"):
            self._result = AuthorizationCodeResult(
                code=query["code"][0], state=(query.get("state") or [None])[0], iss=(query.get("iss") or [None])[0]
            )
            return
        if response.is_redirect and query.get("error"):
            raise OAuthFlowError(f"the authorization server refused: {query['error'][0]} {query.get('error_description', [''])[0]}")
        where = authorization_url.split("?", 1)[0]
        raise OAuthFlowError(
            f"the authorization server at {where} wants a person to sign in (HTTP {response.status_code}, "
            f"no redirect with a code); a job cannot: use grant 'client_credentials' (a service account) "
            f"or sign in once elsewhere and give the refresh token with grant 'refresh_token'"
        )

    async def callback(self) -> Any:
        result, self._result = self._result, None
        return result


def _client_info(config: MCPAuthConfig, redirect_uris: list[str] | None) -> Any:
    from mcp.shared.auth import OAuthClientInformationFull

    if not config.client_id:
        return None
    return OAuthClientInformationFull(
        client_id=config.client_id,
        client_secret=config.client_secret,
        token_endpoint_auth_method=config.auth_method(),
        redirect_uris=redirect_uris,
        scope=config.scope,
        grant_types=[config.grant, "refresh_token"] if config.grant != "client_credentials" else ["client_credentials"],
    )


def build_provider(server_url: str, config: MCPAuthConfig, verify: Any = None) -> Any:
    """The SDK's ``httpx2.Auth`` for ``config`` (a new one; ``oauth_provider`` shares them)."""
    if config.grant == "client_credentials":
        from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

        assert config.client_id and config.client_secret
        method = config.auth_method()
        if method not in ("client_secret_basic", "client_secret_post"):
            raise ValueError("grant 'client_credentials' authenticates with client_secret_basic or client_secret_post")
        import warnings

        with warnings.catch_warnings():  # the SDK deprecates a missing issuer; discovery finds it then
            warnings.simplefilter("ignore")
            return ClientCredentialsOAuthProvider(
                server_url, MemoryTokenStorage(), config.client_id, config.client_secret,
                token_endpoint_auth_method=method, scope=config.scope, issuer=config.issuer,  # type: ignore[arg-type]
            )  # fmt: skip
    if config.grant == "refresh_token":
        return _refresh_provider_class()(server_url, config)
    from mcp.shared.auth import OAuthClientMetadata

    hooks = HeadlessAuthorization(config.redirect_uri, verify if verify is not None else True)
    metadata = OAuthClientMetadata(
        redirect_uris=[config.redirect_uri],  # type: ignore[list-item]
        client_name=config.client_name,
        grant_types=["authorization_code", "refresh_token"],
        token_endpoint_auth_method=config.auth_method() if config.client_id else None,  # type: ignore[arg-type]
        scope=config.scope,
    )
    from mcp.client.auth import OAuthClientProvider

    storage = MemoryTokenStorage(_client_info(config, [config.redirect_uri]))
    return OAuthClientProvider(server_url, metadata, storage, hooks.redirect, hooks.callback)


@functools.cache
def _refresh_provider_class() -> type:
    from mcp.client.auth import OAuthClientProvider

    class RefreshTokenOAuthProvider(OAuthClientProvider):  # type: ignore[misc,valid-type]
        """A pre-provisioned refresh token redeemed at the token endpoint discovery finds.

        The SDK's grant extension point, as its ``ClientCredentialsOAuthProvider`` uses it:
        ``_perform_authorization`` builds the token request once discovery has run (a 401 from
        the MCP server starts it), so the refresh token goes to the authorization server the
        MCP server names, never to a guessed ``/token``. Canary: tests/core/test_mcp_oauth.py.
        """

        def __init__(self, server_url: str, config: MCPAuthConfig):
            from mcp.shared.auth import OAuthClientMetadata

            metadata = OAuthClientMetadata(
                redirect_uris=None, grant_types=["refresh_token"], scope=config.scope,
                token_endpoint_auth_method=config.auth_method(),  # type: ignore[arg-type]
            )  # fmt: skip
            super().__init__(server_url, metadata, MemoryTokenStorage(_client_info(config, None)))
            self._provisioned = config.refresh_token

        async def _perform_authorization(self) -> Any:
            import httpx2

            refresh = self._provisioned
            if self.context.current_tokens is not None and self.context.current_tokens.refresh_token:
                refresh = self.context.current_tokens.refresh_token  # a rotated one
            data = {"grant_type": "refresh_token", "refresh_token": refresh or ""}
            if self.context.client_info is not None:
                data["client_id"] = self.context.client_info.client_id
            if self.context.should_include_resource_param(self.context.protocol_version):
                data["resource"] = self.context.get_resource_url()
            if self.context.client_metadata.scope:
                data["scope"] = self.context.client_metadata.scope
            headers = {"Content-Type": "application/x-www-form-urlencoded"}
            data, headers = self.context.prepare_token_auth(data, headers)
            return httpx2.Request("POST", self._get_token_endpoint(), data=data, headers=headers)

    return RefreshTokenOAuthProvider


def __getattr__(name: str) -> Any:  # the SDK is imported only when OAuth is used
    if name == "RefreshTokenOAuthProvider":
        return _refresh_provider_class()
    raise AttributeError(name)


_PROVIDERS: dict[tuple[Any, ...], Any] = {}


def oauth_provider(server_url: str, config: MCPAuthConfig, verify: Any = None) -> Any:
    """One provider (and so one token) per server, credentials and event loop, shared by the
    episodes of the process: a job does not sign in once per episode."""
    loop = asyncio.get_running_loop()
    key = (id(loop), server_url, config.grant, config.client_id, config.client_secret, config.refresh_token,
           config.scope, config.issuer, config.redirect_uri)  # fmt: skip
    provider = _PROVIDERS.get(key)
    if provider is None:
        stale = [k for k in _PROVIDERS if k[0] != id(loop)]
        for k in stale:  # providers of event loops that are gone (their locks belong to them)
            _PROVIDERS.pop(k, None)
        provider = _PROVIDERS[key] = build_provider(server_url, config, verify)
    return provider
