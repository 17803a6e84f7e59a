"""The official MCP conformance suite (``@modelcontextprotocol/conformance``, installed by make)
against the test kit's MCP server and, with its client scenarios, against aworld-core's MCP client.

Each scenario's expected result is in ``support.mcp_conformance`` (server) and ``CLIENT_EXPECTED``
below; a scenario not applicable to us is listed with the reason and must fail the way it says.
"""

from __future__ import annotations

import sys

import pytest
from support.mcp_conformance import (
    KIT_SERVER_EXPECTED,
    PASS,
    check_against,
    run_server_suite,
    scenarios,
    table,
)

from aworld_core.testing.mcp_server import McpHttpServer

PENDING_SERVER = {  # the suite's pending set, which its default (active) run leaves out
    "server-sse-polling": "pending in the suite",
    "json-schema-2020-12": "pending in the suite",
}


def test_the_tables_cover_every_scenario_of_the_suite():
    assert set(scenarios("server")) == set(KIT_SERVER_EXPECTED) | set(PENDING_SERVER)


def test_kit_server_passes_the_conformance_suite(tmp_path):
    with McpHttpServer(name="conformance") as server:
        results, log = run_server_suite(server.url, tmp_path)
    print(table(results, KIT_SERVER_EXPECTED))
    problems = check_against(results, KIT_SERVER_EXPECTED)
    assert not problems, "\n".join(problems) + "\n" + log
    assert sum(want == PASS for want in KIT_SERVER_EXPECTED.values()) == 7
