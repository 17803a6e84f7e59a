"""Keys and tokens never in printed plans, plan files, argv or logs: every real backend's plan,
the CLI in fresh interpreters (dry run, and a real launch whose command reports what it got),
and the log-record masking."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from pathlib import Path

import pytest
import yaml

from aworld_core.config import load_job_config
from aworld_core.jobs import format_plan, plan_job
from aworld_core.launch import write_plan_files
from aworld_core.secrets import (
    install_log_masking,
    job_secrets,
    public_job_dump,
    register_secret,
    secret_environment,
)
from aworld_core.tools.mcp_config import parse_mcp_config
from support.fake_dists import make_dist, run_cli

KEY = "sk-test-KEY-0123456789abcdef"
TOKEN = "tok-MCP-BEARER-9876543210"
STDIO_KEY = "stdio-SECRET-5555555555"
SECRETS = (KEY, TOKEN, STDIO_KEY)


def job_data(tmp_path: Path) -> dict:
    (tmp_path / "train.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    (tmp_path / "model").mkdir(exist_ok=True)  # validation checks that a local model.path exists
    return {
        "name": "secret-job",
        "model": {"path": str(tmp_path / "model")},
        "agent": {
            "name": "a",
            "llm_api_key": KEY,
            "mcp_config": {
                "mcpServers": {
                    "gaia-env": {
                        "url": "http://127.0.0.1:9/mcp",
                        "headers": {"Authorization": f"Bearer {TOKEN}", "MCP_SERVERS": "wiki"},
                    },
                    "local": {"command": "true", "env": {"SERVICE_API_KEY": STDIO_KEY, "MODE": "x"}},
                }
            },
        },
        "train_dataset": {"path": str(tmp_path / "train.jsonl")},
        "reward": {"name": "gsm8k"},
    }


def assert_clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a secret leaked into {where}"


def test_the_secrets_of_a_job_and_their_references(tmp_path: Path) -> None:
    job = load_job_config(data=job_data(tmp_path))
    found = {s.env: s.path for s in job_secrets(job)}
    assert found == {
        "LLM_API_KEY": ("agent", "llm_api_key"),
        "AWORLD_MCP_TOKEN_GAIA_ENV": (
            "agent",
            "mcp_config",
            "mcpServers",
            "gaia-env",
            "headers",
            "Authorization",
        ),
        "AWORLD_MCP_LOCAL_ENV_SERVICE_API_KEY": (
            "agent",
            "mcp_config",
            "mcpServers",
            "local",
            "env",
            "SERVICE_API_KEY",
        ),
    }
    dump = public_job_dump(job)
    servers = dump["agent"]["mcp_config"]["mcpServers"]
    assert servers["gaia-env"]["headers"] == {
        "Authorization": {"env": "AWORLD_MCP_TOKEN_GAIA_ENV"},
        "MCP_SERVERS": "wiki",
    }
    assert servers["local"]["env"] == {
        "SERVICE_API_KEY": {"env": "AWORLD_MCP_LOCAL_ENV_SERVICE_API_KEY"},
        "MODE": "x",
    }
    assert "llm_api_key" not in dump["agent"]
    assert_clean(json.dumps(dump), "the public dump")
    assert (
        job.agent.mcp_config["mcpServers"]["gaia-env"]["headers"]["Authorization"] == f"Bearer {TOKEN}"
    )  # untouched


def test_a_reference_resolves_from_the_environment_or_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = {
        "mcpServers": {"s": {"url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": {"env": "T_REF"}}}}
    }
    monkeypatch.delenv("T_REF", raising=False)
    with pytest.raises(
        Exception, match="headers.Authorization refers to the environment variable T_REF, which is not set"
    ):
        parse_mcp_config(config)
    monkeypatch.setenv("T_REF", f"Bearer {TOKEN}")
    server = parse_mcp_config(config).mcp_servers["s"]
    assert server.headers["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in repr(server)  # headers are left out of the repr


@pytest.mark.parametrize("backend", ["verl", "areal", "swift", "trl"])
def test_every_backends_plan_files_argv_and_printed_plan_hold_no_secret(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real backends' planners (planning needs no framework): files, command, environment,
    entry-point arguments and the printed plan carry references; the workers resolve them from
    the environment the launch exports."""
    if backend == "verl":  # on a CPU verl's plan names the interpreter of its vLLM rollout server
        monkeypatch.setenv("AWORLD_VLLM_PYTHON", sys.executable)
    job = load_job_config(data={**job_data(tmp_path), "output_dir": str(tmp_path / "out")})
    job = job.model_copy(update={"backend": backend})
    plan, output_dir = plan_job(backend, job)
    written = write_plan_files(plan, output_dir)
    assert written
    for path in written.values():
        assert_clean(Path(path).read_text(), path)
    assert_clean(json.dumps(plan.command), "the command line")
    assert_clean(json.dumps(plan.env), "the plan's environment")
    assert_clean(json.dumps(plan.entrypoint_kwargs, default=str), "the entry point's arguments")
    assert_clean(json.dumps(plan.config, default=str), "the backend config")
    printed = format_plan(plan, job, output_dir)
    assert_clean(printed, "the printed plan")
    assert "AWORLD_MCP_TOKEN_GAIA_ENV" in printed

    # a worker: the job file as the backend's processes read it, with the launch's environment
    job_file = next(
        Path(p) for p in written.values() if Path(p).suffix in (".json", ".yaml") and "job" in Path(p).name
    )
    text = job_file.read_text()
    data = json.loads(text) if job_file.suffix == ".json" else yaml.safe_load(text)
    for name, value in secret_environment(job).items():
        monkeypatch.setenv(name, value)
    worker_job = load_job_config(data=data)
    servers = parse_mcp_config(worker_job.agent.mcp_config).mcp_servers
    assert servers["gaia-env"].headers["Authorization"] == f"Bearer {TOKEN}"
    assert servers["local"].env == {"SERVICE_API_KEY": STDIO_KEY, "MODE": "x"}


@pytest.mark.parametrize("backend", ["verl", "areal", "swift", "trl"])
def test_dry_run_prints_no_key_even_one_typed_as_an_override(backend: str, tmp_path: Path) -> None:
    data = job_data(tmp_path)
    del data["agent"]["llm_api_key"]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(data))
    result = run_cli("--backend", backend, "--config", str(tmp_path / "job.yaml"), "--dry-run",
                     f"agent.llm_api_key={KEY}", f"output_dir={tmp_path / 'out'}")  # fmt: skip
    assert_clean(result.stdout + result.stderr, "the dry run's output")
    assert (
        "agent.llm_api_key was given on the command line" in result.stderr and "LLM_API_KEY" in result.stderr
    )
    spec = importlib.util.find_spec(backend)
    if spec is None or spec.origin is None:  # a dry-run refuses a missing framework as a launch does
        assert result.returncode == 2 and f"needs the '{backend}' framework" in result.stderr
        return
    assert result.returncode == 0, result.stderr
    assert (
        "env: AWORLD_MCP_TOKEN_GAIA_ENV" in result.stdout
        or '"env": "AWORLD_MCP_TOKEN_GAIA_ENV"' in result.stdout
    )


def test_a_bad_key_value_is_not_echoed_in_the_error(tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("name: x\n")
    result = run_cli("--config", str(tmp_path / "job.yaml"), "--dry-run", "agent.llm_api_key=[1234567890123]")
    assert result.returncode == 2
    assert "agent.llm_api_key: got '***'" in result.stderr and "1234567890123" not in result.stderr


# A backend whose command reports what the launched process got: its argv, whether the secrets are
# in its environment, and the MCP config it rebuilds from the plan file.
PROBE_PLUGIN = '''
import json, sys
from aworld_core import Backend, LaunchPlan, hookimpl
from aworld_core.secrets import public_job_dump

PROBE = """
import json, os, sys
from aworld_core.config import load_job_config
from aworld_core.tools.mcp_config import parse_mcp_config
job = load_job_config(data=json.load(open(sys.argv[1])))
headers = parse_mcp_config(job.agent.mcp_config).mcp_servers["gaia-env"].headers
report = {"cmdline": open("/proc/self/cmdline", "rb").read().decode(errors="replace"),
          "llm_key_set": bool(os.environ.get("LLM_API_KEY")),
          "token_env_set": bool(os.environ.get("AWORLD_MCP_TOKEN_GAIA_ENV")),
          "header_resolved": headers["Authorization"].startswith("Bearer tok-MCP")}
open(sys.argv[2], "w").write(json.dumps(report))
"""

@hookimpl
def register_backends():
    return [Backend("probe", "reports what its launched process got", planner=plan)]

def plan(job, output_dir):
    return LaunchPlan(backend="probe", command=[sys.executable, "-c", PROBE, str(output_dir / "job.json"),
                      str(output_dir / "report.json")], files={"job.json": json.dumps(public_job_dump(job))})
'''


def test_a_launched_command_gets_secrets_through_its_environment_not_argv(tmp_path: Path) -> None:
    site = tmp_path / "site"
    make_dist(site, "aworld-probe", "1.0.0", {"probe": "aworld_probe"}, {"aworld_probe.py": PROBE_PLUGIN})
    (tmp_path / "job.yaml").write_text(
        yaml.safe_dump({**job_data(tmp_path), "output_dir": str(tmp_path / "out")})
    )
    result = run_cli("--backend", "probe", "--config", str(tmp_path / "job.yaml"), site=site,
                     env={"AWORLD_LOG_LEVEL": "DEBUG"})  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert_clean(result.stdout + result.stderr, "the CLI's output")
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert_clean(report["cmdline"], "the launched command's argv")
    assert report == {**report, "llm_key_set": True, "token_env_set": True, "header_resolved": True}
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file() and path.name != "report.json":
            assert_clean(path.read_text(errors="replace"), str(path))


def test_registered_secrets_are_masked_in_every_log_record(caplog: pytest.LogCaptureFixture) -> None:
    install_log_masking()
    register_secret(f"Bearer {TOKEN}")
    register_secret(KEY)
    log = logging.getLogger("aworld_core.test_secrets")
    with caplog.at_level(logging.INFO):
        log.info("calling %s with headers %s", "http://127.0.0.1:9/mcp", {"Authorization": f"Bearer {TOKEN}"})
        log.warning("the key %s was refused", KEY)
        logging.getLogger("some.library").error("raw token in text: " + TOKEN)
        try:
            raise RuntimeError(f"401 for key {KEY}")
        except RuntimeError:
            log.exception("request failed")
    text = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert_clean(text, "the log")
    assert (
        "***" in caplog.records[0].getMessage() and "http://127.0.0.1:9/mcp" in caplog.records[0].getMessage()
    )
    assert "RuntimeError: 401 for key ***" in caplog.text


def test_a_secret_factory_option_travels_by_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aworld_core.agents.factory import agent_from_job

    (tmp_path / "fac.py").write_text(
        "from aworld_core import Agent\n"
        "def make(api_key, mode):\n"
        "    return Agent(name=f'{mode}-' + ('right' if api_key == 'opt-SECRET-0123456789' else 'wrong'))\n"
    )
    job = load_job_config(
        data={
            "agent": {
                "factory": f"{tmp_path / 'fac.py'}:make",
                "options": {"api_key": "opt-SECRET-0123456789", "mode": "m"},
            }
        }
    )
    dump = public_job_dump(job)
    assert dump["agent"]["options"] == {"api_key": {"env": "AWORLD_AGENT_OPTION_API_KEY"}, "mode": "m"}
    worker_job = load_job_config(data=dump)
    monkeypatch.delenv("AWORLD_AGENT_OPTION_API_KEY", raising=False)
    with pytest.raises(
        Exception,
        match="agent.options.api_key refers to the environment variable AWORLD_AGENT_OPTION_API_KEY",
    ):
        agent_from_job(worker_job)
    monkeypatch.setenv("AWORLD_AGENT_OPTION_API_KEY", secret_environment(job)["AWORLD_AGENT_OPTION_API_KEY"])
    assert agent_from_job(worker_job).name == "m-right"
