"""The telemetry opt-outs and the vLLM server spec (the process itself runs in tests/verl, tests/areal)."""

from __future__ import annotations

import json

import pytest

from aworld_core.errors import AworldError, UsageError
from aworld_core.offline import OFFLINE_ENV, offline_env, with_offline_env
from aworld_core.vllm_server import (
    VllmServer,
    VllmServerSpec,
    VllmWeightSync,
    free_port,
    tied_head_checkpoint,
    write_safetensors,
)


def test_offline_env_adds_every_opt_out_and_keeps_the_users_values():
    assert offline_env({}) == OFFLINE_ENV
    assert offline_env({"HF_HUB_OFFLINE": "0"})["VLLM_NO_USAGE_STATS"] == "1"
    assert "HF_HUB_OFFLINE" not in offline_env({"HF_HUB_OFFLINE": "0"})  # the user's choice stays
    assert offline_env({"AWORLD_ALLOW_TELEMETRY": "1"}) == {}
    merged = with_offline_env({"RAY_USAGE_STATS_ENABLED": "1"}, base={})
    assert merged["RAY_USAGE_STATS_ENABLED"] == "1" and merged["DO_NOT_TRACK"] == "1"


def test_server_spec_command_and_env(tmp_path):
    spec = VllmServerSpec(python="/opt/vllm/bin/python", model=str(tmp_path), max_model_len=256)
    argv = spec.argv(8123)
    assert argv[:3] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--port") + 1] == "8123" and "--enforce-eager" in argv
    env = spec.child_env(base={})
    assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"


def test_server_spec_without_python_or_url_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("AWORLD_VLLM_PYTHON", raising=False)
    with pytest.raises(UsageError, match="url.*python"):
        VllmServerSpec(model="m").argv(1)


def test_a_server_that_exits_at_once_reports_its_log(tmp_path):
    spec = VllmServerSpec(command=["/bin/sh", "-c", "echo no vllm here; exit 3", "--"], model=str(tmp_path),
                          startup_timeout_s=30)
    with pytest.raises(AworldError, match="exited with code 3(.|\n)*no vllm here"):
        VllmServer(spec, log_path=tmp_path / "server.log").start()


def test_weight_sync_against_a_server_without_dev_routes_names_the_setting(tmp_path):
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class NotFound(BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b'{"detail":"Not Found"}')

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sync = VllmWeightSync(f"http://127.0.0.1:{server.server_port}", timeout_s=5)
        with pytest.raises(AworldError, match="VLLM_SERVER_DEV_MODE"):
            sync.pause()
    finally:
        server.shutdown()


def test_tied_checkpoint_gets_its_own_head(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors import safe_open

    embed = torch.randn(8, 4)
    write_safetensors({"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(4)},
                      tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps({"tie_word_embeddings": True}))
    scratch = tied_head_checkpoint([tmp_path / "model.safetensors"])
    assert scratch is not None
    with safe_open(str(scratch / "aworld-lm-head.safetensors"), framework="pt") as handle:
        assert torch.equal(handle.get_tensor("lm_head.weight"), embed)
    assert (scratch / "config.json").exists()
    # a checkpoint that has its head needs nothing
    write_safetensors({"model.embed_tokens.weight": embed}, tmp_path / "b" / "model.safetensors", tied_embeddings=True)
    assert tied_head_checkpoint([tmp_path / "b" / "model.safetensors"]) is None


def test_free_port_is_below_the_ephemeral_range_and_bindable(tmp_path, monkeypatch):
    """A port the kernel hands out for bind(0) can be taken as an outgoing connection's source port
    before the server binds it; free_port draws below ip_local_port_range instead."""
    import socket

    from aworld_core import vllm_server

    low = vllm_server._ephemeral_low()
    for _ in range(20):
        port = free_port()
        assert max(1024, low - vllm_server._PORTS_BELOW) <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: nothing listens there

    # a system without /proc's range: the usual start, 32768
    monkeypatch.setattr(vllm_server, "_EPHEMERAL_RANGE", tmp_path / "absent")
    assert vllm_server._ephemeral_low() == 32768
    assert free_port() < 32768
