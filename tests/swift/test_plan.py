"""The swift backend's plan: what ``--dry-run`` prints and the command launching runs."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from aworld_core.config import load_job_config
from aworld_core.run import main
from aworld_swift.launch import PLUGIN_FILE, build_plan, command_line, last_metrics, swift_args


def _job_file(tmp_path: Path, **swift: object) -> Path:
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    (tmp_path / "train.jsonl").write_text(json.dumps({"id": "a", "question": "1 + 1?", "answer": "2"}) + "\n")
    job = {
        "name": "plan",
        "output_dir": str(tmp_path / "run"),
        "model": {"path": "model"},
        "agent": {"name": "calc", "max_steps": 3},
        "train_dataset": {"path": "train.jsonl"},
        "reward": {"name": "gsm8k"},
        "rollout": {"max_turns": 3},
        "backends": {"swift": swift},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _dry_run(path: Path, *overrides: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--backend", "swift", "--config", str(path), "--dry-run", *overrides], out=out)
    return code, out.getvalue()


def _command(text: str) -> list[str]:
    lines = text.splitlines()
    return shlex.split(lines[lines.index("command line:") + 1])


def test_dry_run_prints_the_swift_rlhf_command_with_the_traps_handled(tmp_path):
    code, text = _dry_run(_job_file(tmp_path, model_type="qwen2", template="qwen2_5"))
    assert code == 0
    command = _command(text)
    assert command[:4] == [sys.executable, "-m", "swift.cli.main", "rlhf"]
    args = dict(zip(command[4::2], command[5::2], strict=False))
    run = (tmp_path / "run").resolve()
    assert args["--rlhf_type"] == "grpo"
    assert args["--model"] == str(tmp_path / "model")
    assert args["--check_model"] == "false"  # no ModelScope hub contact at start
    assert args["--fp16"] == "false"  # ms-swift would turn fp16 on for a float32 model
    assert args["--dataset"] == str(run / "swift_train.jsonl")
    assert args["--external_plugins"] == str(PLUGIN_FILE)
    assert args["--multi_turn_scheduler"] == "aworld"
    assert args["--max_turns"] == "3"
    assert args["--reward_funcs"] == "aworld"
    assert args["--callbacks"] == "aworld"
    assert args["--model_type"] == "qwen2" and args["--template"] == "qwen2_5"
    assert f"AWORLD_SWIFT_JOB={run / 'job.json'}" in text
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_user_arguments_win_and_plugins_are_added_to_ours(tmp_path):
    job = load_job_config(_job_file(
        tmp_path, model_type="qwen2", template="qwen2_5", reward_funcs=["aworld", "aworld_format"],
        reward_weights=[1.0, 0.5], fp16=True, max_turns=5, external_plugins="mine.py", callbacks=["lisa"],
        aworld={"trajectories": False},
    ))
    args = swift_args(job, tmp_path / "run")
    assert args["reward_funcs"] == ["aworld", "aworld_format"]
    assert args["fp16"] is True and args["max_turns"] == 5
    assert args["external_plugins"] == [str(PLUGIN_FILE), "mine.py"]
    assert args["callbacks"] == ["aworld", "lisa"]
    assert "aworld" not in args  # our own options never reach ms-swift
    command = command_line(args)
    at = command.index("--reward_weights")
    assert command[at + 1 : at + 3] == ["1.0", "0.5"]
    assert command[command.index("--fp16") + 1] == "true"


def test_values_are_written_the_way_ms_swift_parses_them(tmp_path):
    job = load_job_config(_job_file(tmp_path, model_kwargs={"a": 1}, stop_words=["</answer>"], seed=3))
    command = command_line(swift_args(job, tmp_path / "run"))
    assert command[command.index("--model_kwargs") + 1] == '{"a": 1}'
    assert command[command.index("--stop_words") + 1] == "</answer>"
    assert command.count("--seed") == 1 and command[command.index("--seed") + 1] == "3"


def test_a_strategy_written_no_in_yaml_stays_no(tmp_path):
    """``save_strategy: no`` in YAML is the boolean false; ms-swift's strategies take the word 'no'."""
    path = _job_file(tmp_path)
    path.write_text(path.read_text().replace("swift: {}", "swift: {save_strategy: no, eval_strategy: no}"))
    command = command_line(swift_args(load_job_config(path), tmp_path / "run"))
    assert command[command.index("--save_strategy") + 1] == "no"
    assert command[command.index("--eval_strategy") + 1] == "no"


def test_a_local_model_without_model_type_gets_a_note(tmp_path):
    plan = build_plan(load_job_config(_job_file(tmp_path)), tmp_path / "run")
    assert any("model_type" in note and "'qwen2'" in note for note in plan.notes)


def test_bad_aworld_options_are_refused_before_anything_runs(tmp_path):
    code, _ = _dry_run(_job_file(tmp_path, aworld={"trajectorys": True}))
    assert code == 2


def test_swift_is_listed_with_its_framework_installed():
    out = io.StringIO()
    assert main(["--list"], out=out) == 0
    line = next(line for line in out.getvalue().splitlines() if "ms-swift multi-turn GRPO" in line)
    assert "swift installed" in line


def test_launch_refuses_a_job_without_a_reward(tmp_path):
    from aworld_core.errors import UsageError
    from aworld_swift.launch import launch

    job = load_job_config(_job_file(tmp_path)).model_copy(update={"reward": None})
    with pytest.raises(UsageError, match="reward"):
        launch(job, build_plan(job, tmp_path / "run"))


def test_last_metrics_reads_ms_swift_logging(tmp_path):
    log = tmp_path / "logging.jsonl"
    log.write_text("\n".join([
        json.dumps({"loss": 0.1, "reward": 0.25, "global_step/max_steps": "1/2"}),
        json.dumps({"loss": 0.2, "reward": 0.5, "aworld/failed_rate": 0.0, "global_step/max_steps": "2/2"}),
        json.dumps({"train_runtime": 12.5}),
    ]) + "\n")
    assert last_metrics(log) == {"reward": 0.5, "loss": 0.2, "aworld/failed_rate": 0.0,
                                 "global_step/max_steps": "2/2", "train_runtime": 12.5}


def _parsed(arguments_class: type, argv: list[str]) -> object:
    """``argv`` through ms-swift's own argument parser (``HfArgumentParser`` over its arguments
    dataclass, as ``swift.utils.parse_args`` builds it): an unknown flag or a bad value fails here.
    The dataclass itself is not built: its checks want the GPUs and the vLLM of a real server."""
    from swift.utils.utils import _patch_get_type_hints
    from transformers import HfArgumentParser

    with _patch_get_type_hints():
        parser = HfArgumentParser([arguments_class])
    namespace, unknown = parser.parse_known_args(argv)
    assert unknown == []
    return namespace


def _server_line(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith("note: server mode:"))
    return shlex.split(line.split("then launch: ", 1)[1])


def test_server_mode_plans_the_rollout_server_with_what_it_needs(tmp_path, monkeypatch):
    """A rollout server that is the user's (``start_rollout_server: false``): the note gives the line
    to run first, which ms-swift's own parser accepts, and the trainer's command points at it."""
    from swift.arguments import RLHFArguments, RolloutArguments
    from swift.cli.main import ROUTE_MAPPING

    monkeypatch.setenv("AWORLD_LLM_API_KEY", "sk-never-on-a-command-line")
    code, text = _dry_run(_job_file(tmp_path, model_type="qwen2", template="qwen2_5", vllm_mode="server",
                                    rollout={"vllm_gpu_memory_utilization": 0.8, "port": 8123},
                                    aworld={"start_rollout_server": False}))
    assert code == 0
    run = (tmp_path / "run").resolve()
    # the rollout server: its environment in front, then the swift command of this environment
    line = _server_line(text)
    assert line[0] == "env"
    env = dict(item.split("=", 1) for item in line[1:line.index(sys.executable)])
    assert env["AWORLD_SWIFT_JOB"] == str(run / "job.json")
    assert env["AWORLD_SWIFT_SYNC_HOST"] == "127.0.0.1"  # the weight-sync group listens where the server does
    command = line[line.index(sys.executable):]
    assert command[1:4] == ["-m", "swift.cli.main", "rollout"] and ROUTE_MAPPING["rollout"] == "swift.cli.rollout"
    server = _parsed(RolloutArguments, command[4:])
    assert server.multi_turn_scheduler == "aworld" and server.external_plugins == [str(PLUGIN_FILE)]
    assert server.model == str(tmp_path / "model") and (server.model_type, server.template) == ("qwen2", "qwen2_5")
    assert server.max_turns == 3 and server.host == "127.0.0.1" and server.port == 8123
    assert server.vllm_gpu_memory_utilization == 0.8 and server.api_key is None
    # the trainer samples through it
    trainer = _parsed(RLHFArguments, _command(text)[4:])
    assert trainer.use_vllm is True and trainer.vllm_mode == "server"
    assert trainer.vllm_server_host == ["127.0.0.1"] and trainer.vllm_server_port == [8123]
    assert trainer.multi_turn_scheduler == "aworld" and trainer.max_turns == 3
    assert trainer.rollout_importance_sampling_mode == "token_truncate"  # server mode's default
    assert not hasattr(trainer, "rollout")  # the server's section never reaches the trainer
    assert "sk-never-on-a-command-line" not in text


def test_the_rollout_server_renders_conversations_as_the_trainer_does(tmp_path):
    """Every ms-swift template setting that shapes the tokens goes to the server too (the server renders
    the prompts the trainer trains on); a canary for ms-swift adding one."""
    import dataclasses

    from swift.arguments.base_args.template_args import TemplateArguments

    from aworld_swift.launch import TEMPLATE_KEYS, TEMPLATE_TRAINING_ONLY, rollout_args

    assert set(TEMPLATE_KEYS) | set(TEMPLATE_TRAINING_ONLY) == {f.name for f in dataclasses.fields(TemplateArguments)}
    job = load_job_config(_job_file(tmp_path, vllm_mode="server", template="qwen2_5", template_backend="swift",
                                    system="Be brief.", max_length=256, padding_free=True))
    server = rollout_args(job, swift_args(job, tmp_path / "run"))
    assert (server["template"], server["template_backend"], server["system"], server["max_length"]) == (
        "qwen2_5", "swift", "Be brief.", 256)
    assert "padding_free" not in server


def test_server_mode_launch_starts_the_rollout_server_by_default(tmp_path):
    """Launching starts the server the plan carries as data (command, its extra environment, log,
    start-up limit); the note says so, and no line is left for the user to run."""
    code, text = _dry_run(_job_file(tmp_path, model_type="qwen2", template="qwen2_5", vllm_mode="server"))
    assert code == 0
    run = (tmp_path / "run").resolve()
    assert any(line.startswith("note: server mode: launching starts the rollout server") for line in text.splitlines())
    assert "then launch: " not in text
    plan = build_plan(load_job_config(_job_file(tmp_path, vllm_mode="server")), tmp_path / "run")
    server = plan.config["rollout_server"]
    assert server["start"] is True and server["command"][3] == "rollout"
    assert server["env"]["AWORLD_SWIFT_SYNC_HOST"] == "127.0.0.1" and "AWORLD_SWIFT_JOB" not in server["env"]
    assert server["log"] == str(run / "rollout_server.log") and server["startup_timeout_s"] == 900.0
    args = dict(zip(server["command"][4::2], server["command"][5::2], strict=False))
    assert args["--host"] == "127.0.0.1" and args["--port"] == "8000" and plan.config["swift_args"]["vllm_server_port"] == [8000]


def test_server_mode_importance_sampling_is_on_unless_turned_off(tmp_path):
    args = swift_args(load_job_config(_job_file(tmp_path, vllm_mode="server")), tmp_path / "run")
    assert args["rollout_importance_sampling_mode"] == "token_truncate"
    args = swift_args(load_job_config(_job_file(tmp_path, vllm_mode="server", rollout_importance_sampling_mode=None)),
                      tmp_path / "run")
    assert "rollout_importance_sampling_mode" not in args  # ms-swift's default: off
    args = swift_args(load_job_config(_job_file(tmp_path)), tmp_path / "run")
    assert "rollout_importance_sampling_mode" not in args  # colocate: ms-swift's own default


def test_a_started_rollout_server_must_be_the_one_the_trainer_reaches(tmp_path):
    from aworld_core.errors import ConfigError

    job = load_job_config(_job_file(tmp_path, vllm_mode="server", vllm_server_host=["10.0.0.2"]))
    with pytest.raises(ConfigError, match="start_rollout_server: false to use yours"):
        build_plan(job, tmp_path / "run")
    job = load_job_config(_job_file(tmp_path, vllm_mode="server", vllm_server_host=["10.0.0.2"],
                                    aworld={"start_rollout_server": False}))
    assert build_plan(job, tmp_path / "run").config["rollout_server"]["start"] is False


def test_colocate_plans_no_rollout_server(tmp_path):
    plan = build_plan(load_job_config(_job_file(tmp_path)), tmp_path / "run")
    assert "rollout_server" not in plan.config and "--use_vllm" not in plan.command
    assert not any(note.startswith("server mode") for note in plan.notes)


@pytest.mark.parametrize("swift, needle", [
    ({"hub_token": "hf_x"}, "backends.swift.hub_token would put a secret on the command line: set HF_TOKEN"),
    ({"vllm_mode": "server", "rollout": {"api_key": "k"}}, "backends.swift.rollout.api_key would put a secret"),
    ({"vllm_mode": "server", "vllm_server_port": 8001, "rollout": {"port": 8002}}, r"vllm_server_port \(8001\) and "
     r"backends.swift.rollout.port \(8002\) differ"),
    ({"vllm_mode": "server", "use_vllm": False}, "set use_vllm: true"),
    ({"vllm_mode": "server", "rollout": ["--port", "1"]}, "must be a mapping of 'swift rollout' arguments"),
    # ms-swift's jinja backend renders a continued trajectory's id-backed assistant message as text
    ({"template_backend": "jinja"}, "backends.swift.template_backend is 'jinja'.*as the text of the list"),
    ({"vllm_mode": "server", "rollout": {"template_backend": "jinja"}},
     "backends.swift.rollout.template_backend is 'jinja'"),
])
def test_server_mode_and_secrets_are_checked_before_anything_runs(tmp_path, capsys, swift, needle):
    from aworld_core.errors import ConfigError

    with pytest.raises(ConfigError, match=needle):
        build_plan(load_job_config(_job_file(tmp_path, **swift)), tmp_path / "run")
    code, _ = _dry_run(_job_file(tmp_path, **swift))
    assert code == 2 and "error:" in capsys.readouterr().err


def _server(tmp_path: Path, code: str, port: int, group_port: int | None = None) -> object:
    from aworld_swift.rollout_server import RolloutServer

    return RolloutServer([sys.executable, "-c", code, str(port)], {"AWORLD_TEST_MARK": "1"}, host="127.0.0.1",
                         port=port, log_path=tmp_path / "rollout_server.log", startup_timeout_s=60,
                         group_port=group_port)


# a stand-in process for the lifecycle only (ms-swift's real server runs in tests/swift_vllm): answers
# /health on the port it is given, and starts a child that would outlive it
HEALTH_SERVER = """
import http.server, os, subprocess, sys
assert os.environ["AWORLD_TEST_MARK"] == "1"
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(os.environ["CHILD_PID_FILE"], "w").write(str(child.pid))
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"{}")
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def test_the_rollout_server_process_is_waited_for_and_stopped_with_what_it_started(tmp_path, monkeypatch):
    import os

    from aworld_core.vllm_server import free_port

    monkeypatch.setenv("CHILD_PID_FILE", str(tmp_path / "child.pid"))
    with _server(tmp_path, HEALTH_SERVER, free_port()) as server:
        assert server.proc.poll() is None and server.startup_s > 0
        child = int((tmp_path / "child.pid").read_text())
        os.kill(child, 0)  # alive
    assert server.proc is None
    import time

    for _ in range(50):  # killed with the server's process group
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the rollout server's child outlived it")


def test_a_rollout_server_that_dies_or_finds_its_port_taken_is_a_clear_error(tmp_path):
    import socket

    from aworld_core.errors import AworldError, UsageError
    from aworld_core.vllm_server import free_port

    with pytest.raises(AworldError, match=r"(?s)the ms-swift rollout server exited with code 3.*dying on purpose"):
        _server(tmp_path, "import sys; print('dying on purpose', flush=True); sys.exit(3)", free_port()).start()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=rf"rollout server's port 127.0.0.1:{port} is in use.*rollout.port"):
            _server(tmp_path, HEALTH_SERVER, port).start()
        with pytest.raises(UsageError, match=r"weight-sync group's port .* is in use.*vllm_server_group_port"):
            _server(tmp_path, HEALTH_SERVER, free_port(), group_port=port).start()


def test_a_failed_trainer_reports_the_rollout_servers_log_and_stops_it(tmp_path, monkeypatch):
    """The trainer only sees the server's HTTP 500: the launch's error carries the server log's tail;
    the server is stopped all the same."""
    import aworld_core.launch
    import aworld_swift.launch as swift_launch
    from aworld_core.errors import AworldError
    from aworld_core.vllm_server import free_port

    monkeypatch.setenv("CHILD_PID_FILE", str(tmp_path / "child.pid"))
    monkeypatch.setenv("AWORLD_TEST_MARK", "1")
    job = load_job_config(_job_file(tmp_path, vllm_mode="server"))
    plan = build_plan(job, tmp_path / "run")
    port = free_port()
    logged = HEALTH_SERVER.replace("import http.server", "print('MaxLengthError: row(675) > max_length(256)', flush=True)\n"
                                   "import http.server")
    plan.config["rollout_server"].update({"command": [sys.executable, "-c", logged, str(port)],
                                          "args": {"host": "127.0.0.1", "port": port}})
    plan.config["swift_args"]["vllm_server_group_port"] = [free_port()]
    seen = []

    def trainer_fails(plan, output_dir):  # type: ignore[no-untyped-def]
        seen.append(plan.env["AWORLD_SWIFT_JOB"])
        raise AworldError("backend 'swift' command failed with exit code 1")

    monkeypatch.setattr(swift_launch, "write_datasets", lambda job, out: {})
    monkeypatch.setattr(aworld_core.launch, "execute_plan", trainer_fails)
    with pytest.raises(AworldError, match=r"(?s)exit code 1.*rollout server's log .* ends with.*MaxLengthError"):
        swift_launch.launch(job, plan)
    assert seen and (tmp_path / "run" / "job.json").is_file()  # written before the server started
    import socket

    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # stopped


def test_list_says_swift_trains_without_a_gpu_in_each_generation_mode():
    """``--list`` tells the truth: transformers generation, colocated vLLM (its CPU build) and server
    mode (``swift rollout``) all run on a CPU."""
    from aworld_core.plugins import get_plugin_manager

    spec = get_plugin_manager().catalog().backend("swift")
    assert spec.requires_gpu is False
    assert "on a CPU" in spec.description and "colocated" in spec.description and "swift rollout" in spec.description


def test_ms_swift_samples_with_the_jobs_rollout_sampling(tmp_path):
    """The job's rollout.sampling reaches ms-swift's GRPO arguments (its own parser reads the planned
    command), and ms-swift's trainer builds the request_config its engine samples every turn with from
    them (its own _prepare_rollout_params, run on those arguments). backends.swift setting one of them
    to another value is refused naming both keys; the same value is accepted."""
    from swift.arguments import RLHFArguments
    from swift.rlhf_trainers.rollout_mixin import RolloutTrainerMixin

    sampling = ("rollout.sampling.temperature=0.7", "rollout.sampling.top_p=0.8", "rollout.sampling.top_k=5")
    path = _job_file(tmp_path, model_type="qwen2", template="qwen2_5")
    code, text = _dry_run(path, *sampling)
    assert code == 0, text
    trainer = _parsed(RLHFArguments, _command(text)[4:])
    assert (trainer.temperature, trainer.top_p, trainer.top_k) == (0.7, 0.8, 5)
    sampler = SimpleNamespace(args=trainer)
    RolloutTrainerMixin._prepare_rollout_params(sampler)
    request = sampler.request_config
    assert (request.temperature, request.top_p, request.top_k) == (0.7, 0.8, 5)

    code, text = _dry_run(path, *sampling, "backends.swift.temperature=0.7")
    assert code == 0, text
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code, _ = _dry_run(path, *sampling, "backends.swift.top_p=0.95")
    assert code == 2
    assert "rollout.sampling.top_p=0.8 and backends.swift.top_p=0.95" in err.getvalue()
