"""A real MCP SDK server with OAuth on 127.0.0.1: the SDK's own authorization server (metadata,
dynamic registration, /authorize, /token) and bearer check in front of the test kit's tools.

``LoopbackOAuthProvider`` is the SDK's ``OAuthAuthorizationServerProvider`` kept in memory: it
grants every authorization request at once (a pre-consented client), issues access tokens that
live ``token_ttl_s`` seconds, and can hand out a refresh token in advance (``provision``) for a
pre-registered client, as a person signing in once elsewhere would get one.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from typing import Any

from mcp.server.auth.provider import AccessToken, AuthorizationCode, RefreshToken, construct_redirect_uri
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken


class LoopbackOAuthProvider:
    def __init__(self, token_ttl_s: int = 3600):
        self.token_ttl_s = token_ttl_s
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.access: dict[str, AccessToken] = {}
        self.grants: list[str] = []  # what the token endpoint handed out, in order
        self.registered = 0

    # -- clients -------------------------------------------------------------------------------
    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.registered += 1
        self.clients[client_info.client_id] = client_info

    def provision(
        self, client_id: str, client_secret: str, redirect_uri: str, scopes: list[str], resource: str | None = None
    ) -> str:
        """A pre-registered client and a refresh token issued to it for ``resource`` (returned)."""
        self.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id, client_secret=client_secret, token_endpoint_auth_method="client_secret_post",
            redirect_uris=[redirect_uri], grant_types=["authorization_code", "refresh_token"],
            scope=" ".join(scopes),
        )  # fmt: skip
        token = "rt-" + secrets.token_hex(16)
        self.refresh[token] = RefreshToken(token=token, client_id=client_id, scopes=scopes, resource=resource)
        return token

    # -- authorization code --------------------------------------------------------------------
    async def authorize(self, client: OAuthClientInformationFull, params: Any) -> str:
        code = "code-" + secrets.token_hex(16)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300, client_id=client.client_id,
            code_challenge=params.code_challenge, redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly, resource=params.resource,
        )  # fmt: skip
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: Any, authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(self, client: Any, authorization_code: AuthorizationCode) -> OAuthToken:
        self.codes.pop(authorization_code.code, None)
        self.grants.append("authorization_code")
        return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource)

    # -- refresh -------------------------------------------------------------------------------
    async def load_refresh_token(self, client: Any, refresh_token: str) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(self, client: Any, refresh_token: RefreshToken, scopes: list[str]) -> OAuthToken:
        self.refresh.pop(refresh_token.token, None)  # rotated
        self.grants.append("refresh_token")
        return self._issue(client.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    # -- tokens --------------------------------------------------------------------------------
    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access = "at-" + secrets.token_hex(16)
        refresh = "rt-" + secrets.token_hex(16)
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=math.ceil(time.time() + self.token_ttl_s), resource=resource)  # fmt: skip
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes, resource=resource)
        return OAuthToken(access_token=access, token_type="Bearer", expires_in=self.token_ttl_s,
                          scope=" ".join(scopes) or None, refresh_token=refresh)  # fmt: skip

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: Any) -> None:
        self.access.pop(getattr(token, "token", ""), None)


class OAuthMcpServer:
    """The test kit's tools behind the SDK's OAuth (``/mcp``), served by uvicorn from a thread."""

    def __init__(self, *, token_ttl_s: int = 3600, scopes: list[str] | None = None, tools: list[str] | None = None):
        self.provider = LoopbackOAuthProvider(token_ttl_s)
        self.scopes = scopes or ["tools"]
        self.tools = tools
        self.port = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/mcp"

    def start(self) -> OAuthMcpServer:
        import uvicorn
        from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions

        from aworld_core.testing.mcp_server import _bound_socket, build_mcp_server

        sock = _bound_socket("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        auth = AuthSettings(
            issuer_url=self.base, resource_server_url=self.url, required_scopes=self.scopes, validate_token_resource=True,
            client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=self.scopes,
                                                                  default_scopes=self.scopes),
        )  # fmt: skip
        server = build_mcp_server("oauth-tools", self.tools, auth=auth, auth_server_provider=self.provider)
        app = server.streamable_http_app()
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the OAuth MCP server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)
        self._server = self._thread = None

    def __enter__(self) -> OAuthMcpServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
