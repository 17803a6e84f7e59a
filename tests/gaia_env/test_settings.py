"""The settings and the .env template agree: every key is listed, and the template's values load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import aworld_gaia_env
from aworld_gaia_env.settings import GaiaEnvSettings, load_settings

TEMPLATE = Path(aworld_gaia_env.__file__).parent.parent / "deploy" / "env.template"


def _template_keys() -> dict[str, str]:
    pairs = {}
    for line in TEMPLATE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key] = value
    return pairs


def test_template_lists_every_setting():
    env_names = {field.validation_alias.choices[0] for field in GaiaEnvSettings.model_fields.values()}
    assert set(_template_keys()) == env_names


def test_template_values_are_the_defaults(monkeypatch):
    for key in _template_keys():
        monkeypatch.delenv(key, raising=False)
    from_template = load_settings(str(TEMPLATE))
    defaults = GaiaEnvSettings()
    assert from_template.model_dump() == defaults.model_dump()
    assert from_template.gaia_dir is None and from_template.token is None  # empty means unset


def test_cli_values_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("GAIA_ENV_PORT", "9001")
    monkeypatch.setenv("TAVILY_API_KEY", "from-env")
    settings = load_settings(None, port=9002, host=None)
    assert settings.port == 9002 and settings.host == "127.0.0.1" and settings.tavily_api_key == "from-env"


def test_non_loopback_bind_warns_unless_tls_is_in_front():
    from aworld_gaia_env.cli import exposure_warning

    assert exposure_warning("127.0.0.1", False) is None and exposure_warning("::1", False) is None
    assert "TLS terminator" in exposure_warning("0.0.0.0", False)
    assert exposure_warning("0.0.0.0", True) is None
    assert "10.0.0.5" in exposure_warning("10.0.0.5", False)


def _serve(args: list[str], env_extra: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_SERVER_TOKEN", "GAIA_ENV_"))}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-m", "aworld_gaia_env", "serve", "--port", "0", *args],
        capture_output=True, text=True, env=env, timeout=timeout,
    )


@pytest.mark.parametrize(
    ("how", "token"), [("env", "change-me"), ("file", "replace-with-a-long-random-token"), ("env", "short")]
)
def test_placeholder_or_short_token_is_refused_beyond_loopback(tmp_path, how, token):
    args, env = ["--host", "0.0.0.0", "--workspace", str(tmp_path / "ws")], {"MCP_SERVER_TOKEN": token}
    if how == "file":
        (tmp_path / "token").write_text(token + "\n")
        args, env = [*args, "--token-file", str(tmp_path / "token")], {}
    done = _serve(args, env)
    assert done.returncode == 2 and "refusing to bind 0.0.0.0" in done.stderr and '"token"' not in done.stdout


def test_empty_or_missing_token_file_is_an_error(tmp_path):
    (tmp_path / "empty").write_text("\n")
    for path, expected in ((tmp_path / "empty", "is empty"), (tmp_path / "absent", "cannot read the token file")):
        done = _serve(["--token-file", str(path), "--workspace", str(tmp_path / "ws")], {})
        assert done.returncode == 2 and expected in done.stderr


def test_token_file_is_used_and_a_readable_one_warns(tmp_path):
    token = "from-the-file-" + "k" * 30
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    os.chmod(token_file, 0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_SERVER_TOKEN", "GAIA_ENV_"))}
    env["MCP_SERVER_TOKEN_FILE"] = str(token_file)
    proc = subprocess.Popen(
        [sys.executable, "-m", "aworld_gaia_env", "serve", "--port", "0", "--workspace", str(tmp_path / "ws")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["token"] == token
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=20)
    assert "token file" in stderr and "readable by other users" in stderr and token not in stderr


def test_a_missing_env_file_is_refused_not_ignored(tmp_path, capsys):
    from aworld_gaia_env.cli import main

    assert main(["serve", "--env-file", str(tmp_path / "missing.env"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"--env-file {tmp_path / 'missing.env'}: no such file" in err and "deploy/env.template" in err
