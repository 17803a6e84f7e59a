"""The official MCP conformance suite against the GAIA environment, as users start it.

The suite sends no bearer token and the environment has no unauthenticated mode (by design), so a
loopback pass-through (``support.header_proxy``) adds the ``Authorization`` header; everything else
reaches the server as the suite sent it. What each scenario must do: ``GAIA_SERVER_EXPECTED``.
"""

from __future__ import annotations

from support.header_proxy import HeaderProxy
from support.mcp_conformance import GAIA_SERVER_EXPECTED, check_against, run_server_suite, table


def test_gaia_environment_passes_the_conformance_suite(env_server, tmp_path):
    with HeaderProxy(env_server.base, {"Authorization": f"Bearer {env_server.token}"}) as proxy:
        results, log = run_server_suite(proxy.url(), tmp_path)
    print(table(results, GAIA_SERVER_EXPECTED))
    problems = check_against(results, GAIA_SERVER_EXPECTED)
    assert not problems, "\n".join(problems) + "\n" + log
