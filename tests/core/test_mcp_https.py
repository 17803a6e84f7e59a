"""MCP over https through the aiohttp transport (a real SDK server with a certificate made here).

The certificate is self-signed for 127.0.0.1 and made at test time with ``cryptography``; the
client trusts it through the process's TLS context (``mcp_session.ssl_context``), replaced here.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl

import pytest

from aworld_core.errors import MCPConnectionError
from aworld_core.testing import McpHttpServer
from aworld_core.tools import mcp_session
from aworld_core.tools.mcp_client import MCPToolset, close_shared_sessions
from aworld_core.tools.mcp_config import MCPServerConfig


def _self_signed(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = tmp_path / "cert.pem", tmp_path / "key.pem"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(certfile), str(keyfile)


async def _episode(url: str, episode_id: str):
    toolset = MCPToolset({"calc": MCPServerConfig(type="streamable-http", url=url, timeout=5)}, connect_retries=0,
                         headers={"X-Episode-Id": episode_id})  # fmt: skip
    specs = await toolset.open()
    try:
        return await toolset.executor(next(s for s in specs if s.name == "add"))({"a": 20, "b": 22})
    finally:
        await toolset.aclose()


async def test_episodes_reach_an_https_server_with_the_processes_tls_context(tmp_path, monkeypatch):
    certfile, keyfile = _self_signed(tmp_path)
    trusting = ssl.create_default_context(cafile=certfile)
    monkeypatch.setattr(mcp_session, "ssl_context", lambda: trusting)
    async with McpHttpServer(name="calc", tls=(certfile, keyfile)) as server:
        assert server.url.startswith("https://")
        outs = [await _episode(server.url, f"ep-{i}") for i in range(2)]
        await close_shared_sessions()
    assert [o.content for o in outs] == ["42", "42"]
    calls = [h for h in server.headers_seen if h.get("mcp-method") == "tools/call"]
    assert [h.get("x-episode-id") for h in calls] == ["ep-0", "ep-1"]


async def test_an_untrusted_certificate_is_a_loud_start_error(tmp_path, monkeypatch):
    certfile, keyfile = _self_signed(tmp_path)
    monkeypatch.setattr(mcp_session, "ssl_context", lambda: ssl.create_default_context())  # system CAs only
    async with McpHttpServer(name="calc", tls=(certfile, keyfile)) as server:
        with pytest.raises(MCPConnectionError) as info:
            await _episode(server.url, "ep-0")
        await close_shared_sessions()
    text = str(info.value)
    assert "'calc'" in text and server.url in text and "ConnectError" in text and "certificate" in text.lower()
