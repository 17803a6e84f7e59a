"""aworld-areal's plain-vLLM engine for AReaL (``aworld_areal.vllm_engine``) and the CPU launch plan.

Fast: no server, no trainer. The canaries fail loudly when AReaL 1.0.4's seams move: the trainer's
module-global engine class, ``RemotevLLMEngine``'s composition, the backend protocol we override,
the order of the disk weight update (the reload request is built after the checkpoint is
published), and the ``name_resolve`` layout the SPMD launch clears.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
from pathlib import Path

import pytest
import torch
import yaml
from areal.api import WeightUpdateMeta
from areal.api.cli_args import GRPOConfig, InferenceEngineConfig, load_expr_config
from areal.engine.vllm_remote import RemotevLLMEngine, VLLMBackend
from areal.infra.remote_inf_engine import RemoteInfBackendProtocol, RemoteInfEngine

from aworld_areal.config import SERVER_FILE, SPEC_ENV, build_areal_launch, run_options
from aworld_areal.plugin import CONFIG_FILE
from aworld_areal.plugin import plan as areal_plan
from aworld_areal.vllm_engine import ArealVllmEngine, PlainVllmBackend, install
from aworld_core.config import load_job_config
from aworld_core.errors import ConfigError, UsageError
from aworld_core.vllm_server import LM_HEAD, reload_payload

# -- canaries: AReaL's private seams ---------------------------------------------------------------


def test_canary_the_trainer_builds_its_vllm_engine_from_the_module_global_install_rebinds():
    import areal.trainer.rl_trainer as rl_trainer

    source = inspect.getsource(rl_trainer.PPOTrainer._init_rollout)
    # SPMD: engine_cls(config); single controller: engine_cls.as_controller(config, scheduler)
    assert "engine_cls = RemotevLLMEngine" in source and "engine_cls(config)" in source, source
    assert "engine_cls.as_controller(" in source
    assert re.search(r"^from areal\.engine import .*RemotevLLMEngine", inspect.getsource(rl_trainer), re.M)
    original = rl_trainer.RemotevLLMEngine
    try:
        install()
        install()  # idempotent
        assert rl_trainer.RemotevLLMEngine is ArealVllmEngine
    finally:
        rl_trainer.RemotevLLMEngine = original


def test_canary_remote_vllm_engine_is_config_plus_a_remote_inf_engine_composed_with_its_backend():
    config = InferenceEngineConfig(experiment_name="e", trial_name="t")
    theirs, ours = RemotevLLMEngine(config), ArealVllmEngine(config)
    assert set(vars(theirs)) == set(vars(ours)) == {"config", "_engine"}
    assert type(theirs._engine) is type(ours._engine) is RemoteInfEngine
    assert type(theirs._engine.backend) is VLLMBackend and type(ours._engine.backend) is PlainVllmBackend
    # class methods build controllers for the class they are called on (single-controller mode)
    assert "RolloutController(cls," in inspect.getsource(RemotevLLMEngine.as_controller)


@pytest.mark.parametrize("name", ["get_pause_request", "get_resume_request", "build_disk_weight_update_requests",
                                  "build_distributed_weight_update_requests", "build_init_weights_group_request",
                                  "launch_server"])
def test_canary_what_the_backend_overrides_is_areals_protocol(name):
    protocol = inspect.signature(getattr(RemoteInfBackendProtocol, name))
    assert list(inspect.signature(getattr(VLLMBackend, name)).parameters) == list(protocol.parameters)
    assert list(inspect.signature(getattr(PlainVllmBackend, name)).parameters) == list(protocol.parameters)


def test_canary_the_reload_request_is_built_after_the_checkpoint_is_published():
    """``reload_source`` reads the saved checkpoint (the tied-head fix), so AReaL must build the disk
    update's requests only after ``name_resolve`` says the save finished, and then send them in order."""
    from areal.infra import remote_inf_engine

    source = inspect.getsource(remote_inf_engine._update_weights_from_disk)
    assert source.index("name_resolve.wait(") < source.index("backend.build_disk_weight_update_requests(meta)")
    assert "for http_req in weight_reqs.requests:" in source  # one request after the other
    engine_source = inspect.getsource(RemoteInfEngine.update_weights_from_disk)
    assert "clear_checkpoint_after_load" in engine_source and "shutil.rmtree(meta.path" in engine_source


def test_canary_clearing_the_trial_root_forgets_stale_weight_update_keys():
    from areal.utils import names

    root = names.trial_root(experiment_name="e", trial_name="t")
    assert names.update_weights_from_disk("e", "t", 3).startswith(root)
    from areal.infra.launcher import local

    assert "name_resolve.clear_subtree(" in inspect.getsource(local.local_main)  # what AReaL's launcher does


def test_canary_agenerate_waits_while_paused_and_resends_an_aborted_request_with_its_tokens():
    """Why a weight update is never a failed episode: AReaL's own loop (nothing patched)."""
    source = inspect.getsource(RemoteInfEngine.agenerate)
    assert "while self.workflow_executor.is_paused():" in source
    assert 'stop_reason not in ["stop", "tool_calls", "length"]' in source
    assert "req.input_ids += gen_result.output_tokens" in source
    assert "[self.get_version()] * len(gen_result.output_tokens)" in source


# -- the backend's requests -------------------------------------------------------------------------


def _tiny_checkpoint(path: Path, *, tied: bool) -> Path:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(path)
    return path


def test_pause_resume_and_the_disk_update_are_plain_vllm_routes(tmp_path):
    backend = PlainVllmBackend()
    assert (backend.get_pause_request().endpoint, backend.get_resume_request().endpoint) == ("/pause?mode=abort",
                                                                                            "/resume")
    untied = _tiny_checkpoint(tmp_path / "untied", tied=False)
    reload, reset = backend.build_disk_weight_update_requests(WeightUpdateMeta(type="disk", path=str(untied))).requests
    assert (reload.endpoint, reload.payload) == ("/collective_rpc", reload_payload(untied))
    assert (reset.endpoint, reset.payload, reset.method) == ("/reset_prefix_cache", {}, "POST")


def test_a_tied_checkpoint_reloads_from_a_scratch_with_the_head_inside_the_checkpoint(tmp_path):
    from safetensors.torch import load_file

    tied = _tiny_checkpoint(tmp_path / "tied", tied=True)
    assert LM_HEAD not in load_file(str(tied / "model.safetensors"))  # what save_pretrained writes
    (reload, _) = PlainVllmBackend().build_disk_weight_update_requests(
        WeightUpdateMeta(type="disk", path=str(tied))).requests
    source = Path(reload.payload["kwargs"]["weights_path"])
    assert source.parent == tied  # deleted with the checkpoint (clear_checkpoint_after_load)
    heads = {k: v for f in source.glob("*.safetensors") for k, v in load_file(str(f)).items() if k == LM_HEAD}
    embed = load_file(str(tied / "model.safetensors"))["model.embed_tokens.weight"]
    assert torch.equal(heads[LM_HEAD], embed) and (source / "config.json").exists()


def test_updates_plain_vllm_cannot_take_are_refused(tmp_path):
    backend = PlainVllmBackend()
    with pytest.raises(UsageError, match="LoRA"):
        backend.build_disk_weight_update_requests(WeightUpdateMeta(type="disk", path=str(tmp_path), use_lora=True))
    with pytest.raises(NotImplementedError, match="weight_update_mode: disk"):
        backend.build_distributed_weight_update_requests(WeightUpdateMeta(type="xccl"), [])
    with pytest.raises(NotImplementedError, match="weight_update_mode: disk"):
        backend.build_init_weights_group_request("a:1", 0, WeightUpdateMeta(type="xccl"))


# -- the launch plan --------------------------------------------------------------------------------


def _job(tmp_path: Path, **areal):
    (tmp_path / "model").mkdir(exist_ok=True)
    python = tmp_path / "vllm-python"
    python.touch()
    section = {"vllm_server": {"python": str(python)}, **areal}
    return load_job_config(data={"name": "cpu-job", "backend": "areal", "model": {"path": str(tmp_path / "model")},
                                 "train_dataset": {"path": str(tmp_path / "t.jsonl")}, "reward": {"name": "gsm8k"},
                                 "output_dir": str(tmp_path / "out"), "backends": {"areal": section}})


def test_the_cpu_plan_is_spmd_on_a_plain_vllm_server_with_every_variable(tmp_path, monkeypatch):
    monkeypatch.setattr("aworld_areal.config._gpu", lambda: False)
    out = tmp_path / "out"
    plan = areal_plan(_job(tmp_path), out)
    env = plan.env
    assert {k: env[k] for k in ("AREAL_SPMD_MODE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")} == {
        "AREAL_SPMD_MODE": "1", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}
    if "TORCHDYNAMO_DISABLE" not in os.environ:  # torch.compile off on a CPU unless the user set it
        assert env["TORCHDYNAMO_DISABLE"] == "1"
    spec = json.loads(plan.files[SERVER_FILE])
    assert env["AREAL_LLM_SERVER_ADDRS"] == f"127.0.0.1:{spec['port']}" and env[SPEC_ENV] == str(out / SERVER_FILE)
    assert spec["python"] == str(tmp_path / "vllm-python") and spec["model"] == str(tmp_path / "model")
    assert (spec["dtype"], spec["max_model_len"]) == ("float32", 8192)
    argv_note = next(n for n in plan.notes if "-m vllm.entrypoints.openai.api_server" in n)
    assert f"--port {spec['port']}" in argv_note and shlex.split(argv_note)[0] == str(tmp_path / "vllm-python")
    assert any("VLLM_SERVER_DEV_MODE=1" in n for n in plan.notes)
    config = yaml.safe_load(plan.files[CONFIG_FILE])
    assert "scheduler" not in config and "vllm" not in config and "sglang" not in config
    assert config["rollout"]["backend"] == "vllm:d1p1t1" and config["actor"]["weight_update_mode"] == "disk"
    assert (config["actor"]["dtype"], config["actor"]["attn_impl"], config["cluster"]["n_gpus_per_node"]) == (
        "float32", "sdpa", 0)
    (out / CONFIG_FILE).parent.mkdir(parents=True)
    (out / CONFIG_FILE).write_text(plan.files[CONFIG_FILE])
    loaded, _ = load_expr_config(["--config", str(out / CONFIG_FILE)], GRPOConfig)  # AReaL's own loader
    assert loaded.actor.weight_update_mode == "disk" and loaded.rollout.backend == "vllm:d1p1t1"


def test_a_running_server_is_named_by_url_and_nothing_is_started(tmp_path):
    job = _job(tmp_path)
    job.backends["areal"]["vllm_server"] = {"url": "http://127.0.0.1:8123"}
    launch = build_areal_launch(job, tmp_path / "out")
    assert launch.server_address == "127.0.0.1:8123" and launch.server.url == "http://127.0.0.1:8123"
    plan = areal_plan(job, tmp_path / "out")
    assert plan.env["AREAL_LLM_SERVER_ADDRS"] == "127.0.0.1:8123"
    assert any("nothing is started" in n for n in plan.notes)


@pytest.mark.parametrize(("areal", "needle"), [
    ({"vllm": {"dtype": "bfloat16"}}, "backends.areal.vllm configures a server AReaL launches itself"),
    ({"actor": {"weight_update_mode": "xccl"}}, "reloads weights from a checkpoint on disk only"),
    ({"rollout": {"backend": "sglang:d1p1t1"}}, "use vllm:d1p1t1"),
    ({"actor": {"use_lora": True}}, "LoRA is not supported"),
    ({"scheduler": {"type": "local"}}, "not used in SPMD mode"),
    ({"actor": {"backend": "fsdp:d2p1t1"}}, "runs one trainer process"),
    ({"mode": "torchrun"}, "choose one of spmd, single_controller"),
    ({"vllm_server": {"python": "/nonexistent/python"}}, "does not exist"),
    ({"vllm_server": {"pyhton": "x"}}, "pyhton"),
    ({"aworld": {"eval_befor": True}}, "unknown option"),
    ({"aworld": {"plot": "yes"}}, "must be true or false"),
])
def test_what_the_plain_server_or_spmd_would_not_honour_is_refused_at_plan_time(tmp_path, areal, needle):
    job = _job(tmp_path)
    job.backends["areal"].update(areal)
    with pytest.raises(ConfigError, match=re.escape(needle)):
        areal_plan(job, tmp_path / "out")


def test_spmd_needs_a_server_and_single_controller_keeps_the_scheduler(tmp_path):
    job = _job(tmp_path)
    del job.backends["areal"]["vllm_server"]
    job.backends["areal"]["mode"] = "spmd"
    with pytest.raises(ConfigError, match="SPMD mode runs on a vLLM server you name"):
        build_areal_launch(job, tmp_path / "out")
    job = _job(tmp_path, mode="single_controller")
    launch = build_areal_launch(job, tmp_path / "out")
    assert launch.mode == "single_controller" and launch.config["scheduler"] == {"type": "local"}
    plan = areal_plan(job, tmp_path / "out")
    assert "AREAL_SPMD_MODE" not in plan.env and plan.env[SPEC_ENV].endswith(SERVER_FILE)


def test_run_options_defaults():
    assert run_options(None) == {"eval_before": True, "eval_after": True, "eval_concurrency": None, "plot": True,
                                 "save_checkpoint": True, "trajectories": False, "summary_window": 5}


def test_list_says_areal_trains_without_a_gpu():
    from aworld_core.plugins import get_plugin_manager

    spec = get_plugin_manager().catalog().backend("areal")
    assert spec.requires_gpu is False and "vllm_server" in spec.description


def test_canary_areals_saver_imports_the_archon_engine_to_decide_how_to_save(tmp_path):
    """``Saver._should_use_async`` imports ``ArchonEngine`` (which imports triton) on every save;
    ``aworld_areal.without_triton`` replaces exactly that decision where triton is missing."""
    from areal.utils import saver
    from areal.utils.async_checkpoint import AsyncMode

    from aworld_areal import without_triton

    original = saver.Saver._should_use_async
    source = inspect.getsource(original)
    assert "from areal.experimental.engine.archon_engine import ArchonEngine" in source
    assert "if self._should_use_async(engine):" in inspect.getsource(saver.Saver.save)
    try:
        assert without_triton.install() == without_triton.triton_missing()
        if not without_triton.triton_missing():
            pytest.skip("triton is installed: AReaL's own decision runs")
        with pytest.raises(ModuleNotFoundError, match="triton"):  # why the replacement exists
            original(saver.Saver.__new__(saver.Saver), object())
        for mode in AsyncMode:
            fake = saver.Saver.__new__(saver.Saver)
            fake._async_mode = mode
            assert saver.Saver._should_use_async(fake, object()) is False  # an FSDP engine: synchronous
    finally:
        saver.Saver._should_use_async = original


def test_canary_areals_fsdp_engine_packs_sequences_with_cu_seqlens_and_no_mask(tmp_path):
    """AReaL packs a micro-batch into one row (``cu_seq_lens_q`` + per-sequence positions) and passes
    no attention mask, which HF's ``sdpa`` reads as one causal sequence: the sequences attend to each
    other. ``aworld_areal.packed_attention`` (HF's public ``AttentionInterface``) runs them apart."""
    from areal.engine.fsdp_engine import FSDPEngine
    from transformers import AttentionInterface, AutoModelForCausalLM
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from aworld_areal import packed_attention

    source = inspect.getsource(FSDPEngine._prepare_mb_list)
    assert 'mb["cu_seq_lens_q"] = mb["cu_seq_lens_k"] = mb["cu_seqlens"]' in source
    assert "dict(full_attention=None, sliding_attention=None)" in source
    model_dir = _tiny_checkpoint(tmp_path / "m", tied=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="sdpa").eval()
    first, second = torch.tensor([[5, 6, 7, 8, 9, 10]]), torch.tensor([[11, 12, 13, 14]])
    cu = torch.tensor([0, 6, 10], dtype=torch.int32)
    packed_inputs = {"input_ids": torch.cat([first, second, torch.tensor([[0, 0]])], 1),
                     "position_ids": torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1]]),
                     "attention_mask": dict(full_attention=None, sliding_attention=None),
                     "cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": 6, "max_length_k": 6, "use_cache": False}
    registered = AttentionInterface._global_mapping["sdpa"]
    try:
        AttentionInterface.register("sdpa", sdpa_attention_forward)  # HF's own
        with torch.no_grad():
            alone = model(input_ids=second).logits[0]
            crossed = model(**packed_inputs).logits[0, 6:10]
        assert (alone - crossed).abs().max() > 1e-2  # the second sequence saw the first
        packed_attention._installed = False
        packed_attention.install()
        with torch.no_grad():
            packed = model(**packed_inputs).logits[0]
        assert torch.allclose(packed[:6], model(input_ids=first).logits[0], atol=1e-5)
        assert torch.allclose(packed[6:10], alone, atol=1e-5)
    finally:
        AttentionInterface.register("sdpa", registered)
        packed_attention._installed = registered is packed_attention.packed_sdpa


def test_canary_single_controller_workers_build_the_engine_class_by_its_import_path():
    """In single-controller mode the ``RolloutController`` (built by ``ArealVllmEngine.as_controller``)
    has its workers import the engine by ``module.name``, which names ours; they then ask its
    backend to launch the server (``PlainVllmBackend.launch_server``) and reach it with its requests."""
    from areal.infra.controller.rollout_controller import RolloutController

    source = inspect.getsource(RolloutController)
    assert 'engine=f"{engine_class.__module__}.{engine_class.__name__}"' in source
    assert "launch_server" in source
    assert f"{ArealVllmEngine.__module__}.{ArealVllmEngine.__name__}" == "aworld_areal.vllm_engine.ArealVllmEngine"
    launch = inspect.getsource(RemoteInfEngine.launch_server)
    assert 'server_args["port"] = find_free_ports(1)[0]' in launch and "self.backend.launch_server(server_args)" in launch


def test_the_cpu_workers_run_areals_rpc_server_with_the_cpu_fixes(tmp_path, monkeypatch):
    """The CPU plan's workers run ``aworld_areal.rpc_server``, which installs both fixes and then
    runs AReaL's own worker ``main`` (with the arguments the scheduler gave, in ``sys.argv``)."""
    monkeypatch.setattr("aworld_areal.config._gpu", lambda: False)
    launch = build_areal_launch(_job(tmp_path, mode="single_controller"), tmp_path / "out")
    (spec,) = launch.config["actor"]["scheduling_spec"]
    assert spec["cmd"] == "python3 -m aworld_areal.rpc_server" and spec["gpu"] == 0
    from areal.infra.rpc import rpc_server
    from areal.utils import saver
    from transformers import AttentionInterface

    import aworld_areal.rpc_server as worker
    from aworld_areal import packed_attention, without_triton

    seen = {}

    def areals_main():
        seen["sdpa"] = AttentionInterface._global_mapping["sdpa"]
        seen["saver_fixed"] = getattr(saver.Saver._should_use_async, "_aworld", False)

    registered, decision = AttentionInterface._global_mapping["sdpa"], saver.Saver._should_use_async
    monkeypatch.setattr(rpc_server, "main", areals_main)
    try:
        packed_attention._installed = False
        worker.main()
    finally:
        AttentionInterface.register("sdpa", registered)
        packed_attention._installed = registered is packed_attention.packed_sdpa
        saver.Saver._should_use_async = decision
    assert seen["sdpa"] is packed_attention.packed_sdpa
    assert seen["saver_fixed"] is without_triton.triton_missing()


def test_canary_the_local_scheduler_runs_the_workers_cmd_in_this_interpreter_and_environment():
    """Single-controller mode on a CPU: ``aworld_areal.rpc_server`` stands in for AReaL's worker
    command (``scheduling_spec.cmd``). That holds while AReaL's ``LocalScheduler`` runs the command
    as given plus its own ``--port ...`` arguments, with a leading ``python*`` replaced by the
    controller's interpreter (where aworld-areal is installed), in a process that inherits the
    controller's environment (``AWORLD_AREAL_VLLM_SERVER``, ``TORCHDYNAMO_DISABLE`` reach the
    workers); while AReaL's worker module runs nothing but ``main()`` (our module runs the same after
    the fixes); and while the worker builds the engine in its own process by its import path (where
    the fixes are installed)."""
    from areal.infra.rpc import rpc_server
    from areal.infra.rpc.guard import engine_blueprint
    from areal.infra.scheduler.local import LocalScheduler
    from areal.infra.utils import proc

    scheduler = inspect.getsource(LocalScheduler)
    assert "cmd_prefix = shlex.split(scheduling.cmd)" in scheduler, "LocalScheduler no longer runs scheduling_spec.cmd"
    assert 'cmd = [*cmd_prefix, "--port", str(ports[0]), *cmd_suffix]' in scheduler
    assert 'if cmd[0].startswith("python"):' in scheduler and "cmd[0] = sys.executable" in scheduler
    assert re.search(r"run_with_streaming_logs\(\s*cmd,\s*log_file,\s*merged_log,\s*role,\s*env_vars_in_cmd=env,\s*\)",
                     scheduler), "the scheduler now passes the worker a whole environment: check what it inherits"
    streaming = inspect.signature(proc.run_with_streaming_logs)
    assert streaming.parameters["env"].default is None and "env=env," in inspect.getsource(proc.run_with_streaming_logs)
    module = inspect.getsource(rpc_server)
    assert module.rstrip().endswith('if __name__ == "__main__":\n    main()'), "AReaL's worker does more than main()"
    assert "parse_known_args()" in inspect.getsource(rpc_server.main)  # reads the scheduler's arguments itself
    create = inspect.getsource(engine_blueprint.create_engine)
    assert "engine_class = import_from_string(engine)" in create


def test_canary_the_engine_initialize_we_wrap_is_areals():
    """``ArealVllmEngine.initialize`` waits for the server this run spawned, then calls AReaL's: it
    must take what AReaL's takes, and SPMD's ``_init_rollout`` must build the engine and call it."""
    import areal.trainer.rl_trainer as rl_trainer

    assert list(inspect.signature(ArealVllmEngine.initialize).parameters) == list(
        inspect.signature(RemotevLLMEngine.initialize).parameters)
    source = inspect.getsource(rl_trainer.PPOTrainer._init_rollout)
    assert re.search(r"engine = engine_cls\(config\)\s*engine\.initialize\(", source), source
    init = inspect.getsource(rl_trainer.PPOTrainer.__init__)
    # the server's start-up overlaps the actor's because the actor is built before the rollout engine
    assert init.index("self.actor = self._create_train_engine(") < init.index("self.rollout = self._init_rollout(")


def test_canary_the_spmd_environment_is_what_areal_reads(monkeypatch):
    """The CPU plan's SPMD launch sets what AReaL's own launcher sets for its trainer
    (``AREAL_SPMD_MODE=1``) and the server address its engine falls back to
    (``AREAL_LLM_SERVER_ADDRS``, after ``name_resolve``: why the launch clears the trial's names)."""
    from areal.infra.launcher import local
    from areal.utils.environ import is_single_controller

    from aworld_areal.plugin import spmd_env

    env = spmd_env("127.0.0.1:8123")
    monkeypatch.delenv("AREAL_SPMD_MODE", raising=False)
    assert is_single_controller()
    monkeypatch.setenv("AREAL_SPMD_MODE", env["AREAL_SPMD_MODE"])
    assert not is_single_controller()
    assert '"AREAL_SPMD_MODE": "1"' in inspect.getsource(local.local_main)
    source = inspect.getsource(RemoteInfEngine.initialize)
    assert 'os.getenv("AREAL_LLM_SERVER_ADDRS")' in source and 'addrs_str.split(",")' in source
    assert source.index("wait_llm_server_addrs(") < source.index('os.getenv("AREAL_LLM_SERVER_ADDRS")')


def test_canary_the_trainer_commits_each_steps_stats_through_its_stats_logger():
    """``aworld_areal.run`` records ``metrics.jsonl`` by wrapping the trainer's ``stats_logger.commit``
    on the instance, and reads the trainer's ``recover_info``, ``rollout``, ``eval_rollout``,
    ``actor``, ``tokenizer`` and ``processor``."""
    import areal.trainer.rl_trainer as rl_trainer
    from areal.utils.stats_logger import StatsLogger

    assert list(inspect.signature(StatsLogger.commit).parameters) == ["self", "epoch", "step", "global_step", "data"]
    assert "__slots__" not in vars(StatsLogger)  # the instance attribute can be set
    trainer = rl_trainer.PPOTrainer
    assert "self.stats_logger.commit(epoch, epoch_step, global_step, stats)" in inspect.getsource(
        trainer._export_and_commit_stats)
    init = inspect.getsource(trainer.__init__)
    for name in ("stats_logger", "recover_info", "rollout", "eval_rollout", "actor", "tokenizer", "processor"):
        assert re.search(rf"self\.{name}\b[^=\n]*=", init), f"PPOTrainer.__init__ no longer sets self.{name}"
