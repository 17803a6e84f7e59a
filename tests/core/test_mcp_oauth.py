"""OAuth 2.1 for MCP servers (``mcp_auth``) against a real MCP SDK server with the SDK's own
authorization server on loopback (``support.oauth_server``), and elicitation answered by policy.

The conformance suite's auth scenarios (tests/core/test_mcp_conformance.py) cover the protocol's
corners; here: the grants a training job uses, tokens shared by episodes and refreshed when they
expire, secrets out of logs and plan files, a clear error where a person would be needed, an agent
episode end to end, and the canary for the SDK seam ``RefreshTokenOAuthProvider`` relies on.
"""

from __future__ import annotations

import asyncio
import inspect
import logging

import pytest

from aworld_core import Agent, AgentConfig
from aworld_core.errors import ConfigError, MCPConnectionError
from aworld_core.runtime.episode import run_episode
from aworld_core.schemas import EpisodeStatus
from aworld_core.secrets import mask
from aworld_core.tools.mcp_client import MCPToolset, close_shared_sessions
from aworld_core.tools.mcp_config import MCPServerConfig, parse_mcp_config
from support.oauth_server import OAuthMcpServer
from support.openai_stub import OpenAIStub, reply, tool_call

REDIRECT = "http://127.0.0.1:33418/callback"


def entry(server: OAuthMcpServer, **auth) -> dict:
    return {"type": "streamable-http", "url": server.url, "timeout": 10, "session": "episode", "auth": auth}


async def call_add(config: dict) -> str:
    toolset = MCPToolset({"oauth": MCPServerConfig.model_validate(config)})
    try:
        specs = await toolset.open()
        spec = next(s for s in specs if s.real_name == "add")
        outcome = await toolset.executor(spec)({"a": 40, "b": 2})
        assert not outcome.is_error, outcome.content
        return outcome.content
    finally:
        await toolset.aclose()
        await close_shared_sessions()


async def test_authorization_code_with_dynamic_registration_signs_in_once_for_all_episodes():
    with OAuthMcpServer(tools=["add"]) as server:
        config = entry(server, grant="authorization_code")
        assert await call_add(config) == "42"
        assert await call_add(config) == "42"  # a second episode: the token is reused
    assert server.provider.registered == 1  # dynamic client registration, once
    assert server.provider.grants == ["authorization_code"]


async def test_a_pre_provisioned_refresh_token_is_redeemed_and_refreshed_on_expiry(monkeypatch, caplog):
    with OAuthMcpServer(tools=["add"], token_ttl_s=2) as server:
        token = server.provider.provision("trainer", "trainer-secret-1234", REDIRECT, ["tools"], server.url)
        monkeypatch.setenv("OAUTH_REFRESH", token)
        config = entry(server, grant="refresh_token", client_id="trainer", client_secret="trainer-secret-1234",
                       token_endpoint_auth_method="client_secret_post", refresh_token={"env": "OAUTH_REFRESH"})  # fmt: skip
        caplog.set_level(logging.DEBUG)
        assert await call_add(config) == "42"
        # On a loaded machine the 2 s token can expire during the first episode too, and the client
        # then refreshes once more there: count what the sleep caused, not an exact total.
        redeemed = len(server.provider.grants)
        await asyncio.sleep(3.5)  # the access token (2-3 s) expired: the next episode refreshes it
        assert await call_add(config) == "42"
    assert redeemed >= 1 and len(server.provider.grants) > redeemed
    assert set(server.provider.grants) == {"refresh_token"}
    issued = list(server.provider.access)
    assert mask(token) == "***" and all(mask(t) == "***" for t in issued)
    assert token not in caplog.text and not any(t in caplog.text for t in issued)


async def test_a_server_that_wants_a_person_is_a_clear_error_naming_the_job_grants():
    with OAuthMcpServer(tools=["add"]) as server:

        async def login_page(client, params):  # a real sign-in page instead of an immediate grant
            return f"{server.base}/login?client={client.client_id}"

        server.provider.authorize = login_page
        toolset = MCPToolset({"oauth": MCPServerConfig.model_validate(entry(server, grant="authorization_code"))},
                             connect_retries=0)  # fmt: skip
        with pytest.raises(MCPConnectionError) as failure:
            await toolset.open()
    message = str(failure.value)
    assert "wants a person to sign in" in message
    assert "client_credentials" in message and "refresh_token" in message


def test_auth_config_is_checked_and_its_secrets_stay_out_of_plan_files(monkeypatch):
    from types import SimpleNamespace

    from aworld_core.secrets import (
        job_secrets,
        public_job_dump,  # noqa: F401  (the plan-file writer's view)
    )

    with pytest.raises(ConfigError, match="needs client_id and client_secret"):
        parse_mcp_config({"mcpServers": {"s": {"url": "http://127.0.0.1:1/mcp", "auth": {"grant": "client_credentials"}}}})
    with pytest.raises(ConfigError, match="both 'auth' and an Authorization header"):
        parse_mcp_config({"mcpServers": {"s": {"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer x"},
                                               "auth": {"grant": "authorization_code"}}}})  # fmt: skip
    with pytest.raises(ConfigError, match="environment references"):
        parse_mcp_config({"mcpServers": {"s": {"url": "http://127.0.0.1:1/mcp", "auth": {
            "grant": "refresh_token", "client_id": "c", "refresh_token": {"env": "HOME"}}}}}, env_refs=False)  # fmt: skip
    conf = {"mcpServers": {"srv": {"url": "http://127.0.0.1:1/mcp", "auth": {
        "grant": "client_credentials", "client_id": "svc", "client_secret": "svc-secret-value"}}}}  # fmt: skip
    job = SimpleNamespace(agent=SimpleNamespace(llm_api_key=None, options={}, mcp_config=conf))
    [secret] = job_secrets(job)
    assert secret.env == "AWORLD_MCP_SRV_AUTH_CLIENT_SECRET" and secret.path[-2:] == ("auth", "client_secret")
    assert "svc-secret-value" not in repr(parse_mcp_config(conf).mcp_servers["srv"])


async def test_an_agent_uses_an_oauth_protected_server_end_to_end():
    with OAuthMcpServer(tools=["add"]) as server, OpenAIStub() as stub:
        stub.add(reply(tool_calls=[tool_call("add", {"a": 2, "b": 3}, id="c1")]), reply("It is 5."))
        agent = Agent(
            "solver",
            system_prompt="Use the tools.",
            conf=AgentConfig(llm_base_url=stub.base_url, llm_model_name="m", llm_retries=0),
            mcp_config={"mcpServers": {"calc": entry(server, grant="authorization_code")}},
        )
        episode = await run_episode(agent, "2+3?")
        await agent.aclose()
        await close_shared_sessions()
    assert episode.status is EpisodeStatus.SUCCESS, episode.error
    [result] = episode.steps[0].exp_data.state.action_result
    assert (result.tool_name, result.server, result.content, result.is_error) == ("add", "calc", "5", False)
    assert episode.final_answer == "It is 5." and server.provider.grants == ["authorization_code"]


def test_canary_the_sdk_grant_seam_refresh_token_provider_uses():
    """``RefreshTokenOAuthProvider`` overrides ``OAuthClientProvider._perform_authorization`` (the
    SDK's own extension point: its ``ClientCredentialsOAuthProvider`` does the same) and uses
    ``_get_token_endpoint`` and ``context.prepare_token_auth``. If the SDK renames or reshapes
    them, this fails before an OAuth job does."""
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
    from mcp.client.auth.oauth2 import OAuthContext

    assert inspect.iscoroutinefunction(OAuthClientProvider._perform_authorization)
    assert list(inspect.signature(OAuthClientProvider._perform_authorization).parameters) == ["self"]
    assert ClientCredentialsOAuthProvider._perform_authorization is not OAuthClientProvider._perform_authorization
    assert list(inspect.signature(OAuthClientProvider._get_token_endpoint).parameters) == ["self"]
    assert list(inspect.signature(OAuthContext.prepare_token_auth).parameters)[:3] == ["self", "data", "headers"]
    from aworld_core.tools.mcp_auth import RefreshTokenOAuthProvider

    assert issubclass(RefreshTokenOAuthProvider, OAuthClientProvider)
