"""The CLI end to end, in fresh interpreters: listing, planning, and every bad-input path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from support.fake_dists import make_dist, run_cli

BACKEND_PLUGIN = '''
from aworld_core import Backend, LaunchPlan, hookimpl

def plan(job, output_dir):
    return LaunchPlan(backend="{name}", entrypoint="{module}:train", entrypoint_kwargs={{"name": job.name}})

@hookimpl
def register_backends():
    return [Backend("{name}", "a test backend from {dist}", planner=plan)]

def train(name):
    return {{"trained": name}}
'''


# A backend that records the output directory it is given, and runs a command that reports
# where it runs and where the file named on its command line is.
WHERE_PLUGIN = '''
import json, sys
from pathlib import Path
from aworld_core import Backend, LaunchPlan, hookimpl

REPORT = "import json, os, sys; print('REPORT ' + json.dumps({'cwd': os.getcwd(), 'arg': os.path.abspath(sys.argv[1])}))"

@hookimpl
def register_backends():
    return [Backend("where", "reports the paths it is given", planner=plan)]

def plan(job, output_dir):
    seen = {"output_dir": str(output_dir), "absolute": Path(output_dir).is_absolute(),
            "train": job.train_dataset.path if job.train_dataset else None}
    return LaunchPlan(backend="where", command=[sys.executable, "-c", REPORT, str(output_dir / "seen.json")],
                      cwd=job.backend_section("where").get("cwd"), files={"seen.json": json.dumps(seen)})
'''


def _installed(framework: str) -> bool:
    """Whether the framework is importable (tests/verl on sys.path is a namespace package, not verl)."""
    spec = importlib.util.find_spec(framework)
    return spec is not None and spec.origin is not None


ROW = '{"question": "What is 2+3?", "answer": "5"}\n'


@pytest.fixture
def where(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The 'where' backend installed in a site folder; a config folder and a separate shell folder."""
    site, conf, shell = tmp_path / "site", tmp_path / "conf", tmp_path / "shell"
    make_dist(site, "aworld-where", "1.0.0", {"where": "aworld_where"}, {"aworld_where.py": WHERE_PLUGIN})
    conf.mkdir()
    shell.mkdir()
    (conf / "data").mkdir()
    (conf / "data" / "train.jsonl").write_text(ROW)  # validation checks that named files exist
    (shell / "mine.jsonl").write_text(ROW)
    (conf / "job.yaml").write_text("name: where-job\nbackend: where\noutput_dir: out\ntrain_dataset: {path: data/train.jsonl}\n")
    return site, conf.resolve(), shell.resolve()


def _report(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("REPORT "))[len("REPORT "):])


def test_a_relative_output_dir_is_made_absolute_beside_the_config_before_planning(where):
    site, conf, shell = where
    result = run_cli("--config", "../conf/job.yaml", site=site, cwd=shell)  # a config path typed relative
    assert result.returncode == 0, result.stderr
    seen = json.loads((conf / "out" / "seen.json").read_text())
    assert seen == {"output_dir": str(conf / "out"), "absolute": True, "train": str(conf / "data" / "train.jsonl")}
    # the command runs in the output directory and finds the file the plan named
    assert _report(result.stdout) == {"cwd": str(conf / "out"), "arg": str(conf / "out" / "seen.json")}
    assert not (shell / "out").exists()


def test_dry_run_and_overrides_use_the_current_directory(where):
    site, conf, shell = where
    result = run_cli("--config", str(conf / "job.yaml"), "--dry-run", "output_dir=o2",
                     "train_dataset.path=mine.jsonl", site=site, cwd=shell)
    assert result.returncode == 0, result.stderr
    assert f"output directory: {shell / 'o2'}\n" in result.stdout
    assert f"  (in {shell / 'o2'})\n" in result.stdout
    assert f"path: {shell / 'mine.jsonl'}" in result.stdout
    assert not (shell / "o2").exists()
    unset = run_cli("--config", str(conf / "job.yaml"), "--dry-run", "output_dir=null", site=site, cwd=shell)
    assert unset.returncode == 0, unset.stderr
    assert f"output directory: {shell / 'runs' / 'where-job'}\n" in unset.stdout  # AWORLD_OUTPUT_ROOT, default runs


def test_help_states_the_path_rules():
    result = run_cli("--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "relative paths written in the config file are relative to the file's directory" in text
    assert "relative paths given as key.path=value overrides are relative to the current directory" in text


def test_a_relative_plan_cwd_is_inside_the_output_directory(where):
    site, conf, shell = where
    result = run_cli("--config", str(conf / "job.yaml"), "backends.where.cwd=work", site=site, cwd=shell)
    assert result.returncode == 0, result.stderr
    assert _report(result.stdout) == {"cwd": str(conf / "out" / "work"), "arg": str(conf / "out" / "seen.json")}


def _backend_dist(site: Path, dist: str, module: str, name: str) -> None:
    source = BACKEND_PLUGIN.format(name=name, dist=dist, module=module)
    make_dist(site, dist, "1.2.3", {module: module}, {f"{module}.py": source})


def _trainable(folder: Path) -> str:
    """The job lines a training backend needs (a model directory, data, a reward), made in ``folder``:
    a dry-run refuses a job without them as a launch does."""
    (folder / "model").mkdir(exist_ok=True)
    (folder / "train.jsonl").write_text(ROW)
    return "model: {path: ./model}\ntrain_dataset: {path: train.jsonl}\nreward: {name: gsm8k}\n"


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text("name: cli-test\nagent:\n  name: a\n  max_steps: 3\n" + _trainable(tmp_path))
    return path


def test_list_shows_core_and_every_plugin_with_distribution_and_version():
    result = run_cli("--list")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "aworld-core 0.1.0" in out
    for dist in ("aworld-verl", "aworld-areal", "aworld-swift", "aworld-trl", "aworld-gaia-env"):
        assert f"{dist} 0.1.0" in out
    # frameworks that are not installed in this environment are reported, not crashed on
    backends = out.split("Backends:\n", 1)[1]
    verl_line = next(line for line in backends.splitlines() if line.strip().startswith("verl "))
    assert "framework not installed" in verl_line and "pip install 'aworld-verl[verl]'" in verl_line
    assert "gsm8k" in out and "gaia" in out
    # aworld-service adds `aworld serve` through register_commands; --list shows it like the others
    assert "aworld-service 0.1.0" in out
    commands = out.split("Commands:\n", 1)[1]
    assert any(line.split()[:2] == ["serve", "aworld-service"] for line in commands.splitlines())


COMMAND_PLUGIN = '''
import sys
from aworld_core import hookimpl
from aworld_core.specs import Command

def hello(argv):
    print("hello " + " ".join(argv))
    return 3 if "fail" in argv else 0

@hookimpl
def register_commands():
    return [Command("hello", "says hello", hello), Command("hello-ref", "by reference", "aworld_hello:hello")]
'''


def test_a_plugin_adds_a_subcommand(tmp_path: Path):
    site = tmp_path / "site"
    make_dist(site, "aworld-hello", "0.2.0", {"hello": "aworld_hello"}, {"aworld_hello.py": COMMAND_PLUGIN})
    ran = run_cli("hello", "a", "--flag", "k=v", site=site)  # everything after the name is the command's
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "hello a --flag k=v\n"
    assert run_cli("hello-ref", "fail", site=site).returncode == 3  # its exit code is the CLI's
    listing = run_cli("--list", site=site)
    commands = listing.stdout.split("Commands:\n", 1)[1]
    assert any(line.split()[:3] == ["hello", "aworld-hello", "says"] for line in commands.splitlines())


def test_an_unknown_command_exits_2_naming_what_installs_it(tmp_path: Path):
    # the core names no command itself: without aworld-service's plugin there is no `serve`
    missing = run_cli("serve", "--port", "1", env={"AWORLD_DISABLE_PLUGINS": "service"})
    assert missing.returncode == 2
    assert "unknown command 'serve'" in missing.stderr and "pip install aworld-service" in missing.stderr
    other = run_cli("frobnicate")
    assert other.returncode == 2 and "unknown command 'frobnicate'" in other.stderr
    assert "aworld --config job.yaml" in other.stderr and "serve" in other.stderr  # the installed ones


def test_a_command_name_the_job_command_line_would_misread_is_refused():
    from aworld_core.specs import Command

    for bad in ("-x", "a=b", "two words", ""):
        with pytest.raises(ValueError, match="use one word"):
            Command(bad, "bad", "m:f")


@pytest.mark.parametrize("backend", ["verl", "areal", "swift", "trl"])
def test_dry_run_works_for_every_skeleton_backend(backend: str, job_file: Path, tmp_path: Path):
    result = run_cli("--backend", backend, "--config", str(job_file), "--dry-run", f"output_dir={tmp_path / 'out'}")
    if backend != "trl" and not _installed(backend):
        # a dry-run refuses what the launch would: the framework is missing here (its suite plans it)
        assert result.returncode == 2, result.stdout
        assert f"needs the '{backend}' framework" in result.stderr
        assert f"pip install 'aworld-{backend}[{backend}]'" in result.stderr
        return
    assert result.returncode == 0, result.stderr
    assert f"backend: {backend}" in result.stdout
    assert "--- resolved job config ---" in result.stdout
    assert "max_steps: 3" in result.stdout
    assert not (tmp_path / "out").exists(), "--dry-run must not write or launch anything"


@pytest.mark.skipif(not _installed("verl"),
                    reason="a verl dry-run needs verl (tests/verl/test_launch.py plans it in .venvs/verl)")
def test_dry_run_prints_command_line_and_user_overrides(job_file: Path):
    result = run_cli("--backend", "verl", "--config", str(job_file), "--dry-run",
                     "backends.verl.trainer.total_epochs=3", "backends.verl.actor_rollout_ref.rollout.name=sglang")
    assert result.returncode == 0, result.stderr
    command = result.stdout.split("command line:\n", 1)[1].splitlines()[0]
    assert "verl.trainer.main_ppo" in command
    assert "trainer.total_epochs=3" in command
    assert "actor_rollout_ref.rollout.name=sglang" in command and "rollout.name=vllm" not in command


def test_unknown_backend_names_the_install_line_and_installed_backends(job_file: Path):
    result = run_cli("--backend", "nosuch", "--config", str(job_file))
    assert result.returncode == 2
    assert "backend 'nosuch' is not installed; no distribution of this project provides it (they provide:" in result.stderr
    installed = result.stderr.split("installed backends: ", 1)[1].split("\n", 1)[0].split(", ")
    assert installed == sorted(installed) and {"areal", "swift", "trl", "verl"} <= set(installed)


def test_default_backend_is_trl(job_file: Path):
    result = run_cli("--config", str(job_file), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "backend: trl" in result.stdout


def test_default_backend_missing_gives_a_clear_message(job_file: Path):
    result = run_cli("--config", str(job_file), env={"AWORLD_DISABLE_PLUGINS": "trl"})
    assert result.returncode == 2
    assert "default backend 'trl' is not installed" in result.stderr
    assert "pip install aworld-trl" in result.stderr


def test_backend_whose_framework_is_missing_fails_clearly_on_launch(job_file: Path):
    result = run_cli("--backend", "verl", "--config", str(job_file))
    assert result.returncode == 2
    assert "needs the 'verl' framework" in result.stderr and "pip install 'aworld-verl[verl]'" in result.stderr


def test_broken_plugin_is_reported_and_others_keep_working(tmp_path: Path, job_file: Path):
    site = tmp_path / "site"
    make_dist(site, "aworld-broken", "0.0.1", {"broken": "aworld_broken"},
              {"aworld_broken.py": "raise RuntimeError('boom at import')\n"})
    _backend_dist(site, "aworld-good", "aworld_good", "good")
    listing = run_cli("--list", site=site)
    assert listing.returncode == 0, listing.stderr
    broken = next(line for line in listing.stdout.splitlines() if "aworld-broken" in line)
    assert "ERROR" in broken and "RuntimeError: boom at import" in broken
    assert "aworld-good 1.2.3" in listing.stdout
    launched = run_cli("--backend", "good", "--config", str(job_file), f"output_dir={tmp_path / 'out'}", site=site)
    assert launched.returncode == 0, launched.stderr
    assert "trained: cli-test" in launched.stdout


def test_plugin_whose_register_hook_raises_is_reported(tmp_path: Path):
    site = tmp_path / "site"
    source = "from aworld_core import hookimpl\n\n@hookimpl\ndef register_backends():\n    raise ValueError('bad spec')\n"
    make_dist(site, "aworld-badhook", "0.3.0", {"badhook": "aworld_badhook"}, {"aworld_badhook.py": source})
    listing = run_cli("--list", site=site)
    assert listing.returncode == 0, listing.stderr
    line = next(line for line in listing.stdout.splitlines() if "aworld-badhook" in line)
    assert "register_backends failed" in line and "bad spec" in line
    assert "trl " in listing.stdout


def test_two_plugins_claiming_one_backend_is_an_error_naming_both(tmp_path: Path, job_file: Path):
    site = tmp_path / "site"
    _backend_dist(site, "aworld-first", "aworld_first", "same")
    _backend_dist(site, "aworld-second", "aworld_second", "same")
    result = run_cli("--backend", "same", "--config", str(job_file), site=site)
    assert result.returncode == 2
    assert "backend 'same' is provided by more than one distribution" in result.stderr
    assert "aworld-first 1.2.3" in result.stderr and "aworld-second 1.2.3" in result.stderr
    listing = run_cli("--list", site=site)  # listing still works and shows the conflict
    assert listing.returncode == 0
    assert "backend 'same': aworld-first 1.2.3, aworld-second 1.2.3" in listing.stdout
    # other backends are unaffected
    assert run_cli("--backend", "trl", "--config", str(job_file), "--dry-run", site=site).returncode == 0


def test_disabling_a_plugin_by_setting(tmp_path: Path, job_file: Path):
    site = tmp_path / "site"
    _backend_dist(site, "aworld-first", "aworld_first", "same")
    _backend_dist(site, "aworld-second", "aworld_second", "same")
    result = run_cli("--backend", "same", "--config", str(job_file), f"output_dir={tmp_path / 'o'}",
                     site=site, env={"AWORLD_DISABLE_PLUGINS": "aworld_second"})
    assert result.returncode == 0, result.stderr
    listing = run_cli("--list", site=site, env={"AWORLD_DISABLE_PLUGINS": "aworld_second"})
    assert "[disabled]" in next(line for line in listing.stdout.splitlines() if "aworld-second" in line)


def test_invalid_config_field_names_field_value_and_expected_form(tmp_path: Path):
    path = tmp_path / "job.yaml"
    path.write_text("agent:\n  max_steps: many\n  nmae: typo\nrollout:\n  concurrency: 0\n")
    result = run_cli("--config", str(path), "--dry-run")
    assert result.returncode == 2
    err = result.stderr
    assert "agent.max_steps: got 'many'; expected" in err and "integer" in err
    assert "agent.nmae: got 'typo'; expected no such field" in err
    assert "rollout.concurrency: got 0; expected" in err and "greater than or equal to 1" in err


def test_bad_override(job_file: Path):
    result = run_cli("--config", str(job_file), "--dry-run", "agent.max_steps")
    assert result.returncode == 2
    assert "bad override 'agent.max_steps': expected the form key.path=value" in result.stderr
    typed = run_cli("--config", str(job_file), "--dry-run", "agent.max_steps=lots")
    assert typed.returncode == 2 and "agent.max_steps: got 'lots'" in typed.stderr
    nested = run_cli("--config", str(job_file), "--dry-run", "agent.name.first=x")
    assert nested.returncode == 2 and "agent.name is 'a', not a section" in nested.stderr


def test_missing_config_file(tmp_path: Path):
    result = run_cli("--config", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert f"config file '{tmp_path / 'nope.yaml'}' not found" in result.stderr


def test_bad_cli_arguments_exit_2():
    assert run_cli("--no-such-flag").returncode == 2
    missing = run_cli()
    assert missing.returncode == 2 and "--config FILE is required" in missing.stderr


def test_json_config_and_override_values_are_typed(tmp_path: Path):
    path = tmp_path / "job.json"
    servers = {"a": {"url": "http://127.0.0.1:9/mcp"}, "b": {"url": "http://127.0.0.1:9/mcp"}}
    job = {"name": "j", "agent": {"mcp_config": {"mcpServers": servers}}, "rollout": {"sampling": {"temperature": 0.5}},
           **yaml.safe_load(_trainable(tmp_path))}
    path.write_text(json.dumps(job))
    result = run_cli("--config", str(path), "--dry-run", "rollout.sampling.top_k=5", "backends.trl.learning_rate=1e-5",
                     "backends.trl.use_cpu=true", "agent.mcp_servers=[a, b]")
    assert result.returncode == 0, result.stderr
    assert "top_k: 5" in result.stdout and "learning_rate: 1.0e-05" in result.stdout
    assert "use_cpu: true" in result.stdout and "- a\n" in result.stdout
