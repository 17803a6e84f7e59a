"""The worker kit: the worker half of every backend, written once.

A backend's worker (a TRL trainer, a verl agent-loop worker, an AReaL rollout worker, an
ms-swift scheduler, the task service) does the same things in the same order:

1. ``load_job`` / ``build_agent``: the job from its serialized config, the agent once per process
   (the job's ``Agent``/``Swarm``, or an :class:`OpenAIAgent`: a function written against the
   OpenAI API that the core's ``rollout`` hook runs through the gateway, ``agent.openai_agent``);
2. ``build_token_llm``: the token-level client over the framework's engine (one rule for the chat
   template, the tool parser and the limits);
3. ``EpisodeRunner``: episodes or GRPO groups through the ``rollout`` hook, every failure
   recorded, scored, the group policy applied, ``on_episode_end`` once;
4. ``episodes_to_batch`` / ``views_to_batch`` / ``group_advantages``: training segments to the
   tensors of a step, one row per segment, credited by ``worker.credit``'s rule;
5. ``FailedSteps`` / ``step_metrics`` / ``StepRecorder``: per-step failure counts, the reasons
   and their log lines, and a stop after N all-failed steps;
6. ``WorkerCache`` / ``Rendezvous``: per-process state keyed by the job, and GRPO groups for
   frameworks that run one member per call;
7. ``outcome_record`` / ``trained_records`` / ``merge_step_metrics`` / ``mask_runs``: the plain
   JSON a framework's workers hand back to its driver, and the per-step metrics from it;
8. ``LoopThread`` / ``closing_shared_sessions``: the async episode code from a synchronous
   framework's thread, and the shared MCP sessions closed when the worker stops.

The names exported here are the worker half of the plugin API (``aworld_core.plugin_api``); the
``aworld_core.worker.*`` submodules are private: import from ``aworld_core.worker``.

See docs/writing-a-plugin.md ("The worker half").
"""

from __future__ import annotations

from aworld_core.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "load_job": "aworld_core.worker.build",
    "build_agent": "aworld_core.worker.build",
    "build_token_llm": "aworld_core.worker.build",
    "chat_template_of": "aworld_core.worker.build",
    "tool_parser_of": "aworld_core.worker.build",
    "job_key": "aworld_core.worker.build",
    "pad_id_of": "aworld_core.worker.build",
    "agent_from_ref": "aworld_core.worker.build",
    "check_agent": "aworld_core.worker.build",
    "OpenAIAgent": "aworld_core.worker.openai_agent",
    "run_openai_episode": "aworld_core.worker.openai_agent",
    "Gateways": "aworld_core.worker.openai_agent",
    "WorkerCache": "aworld_core.worker.cache",
    "shared_tokenizer": "aworld_core.worker.cache",
    "options_key": "aworld_core.worker.cache",
    "StepRecorder": "aworld_core.worker.outcomes",
    "outcome_reason": "aworld_core.worker.outcomes",
    "describe": "aworld_core.worker.outcomes",
    "count_metrics": "aworld_core.worker.outcomes",
    "REASONS": "aworld_core.worker.outcomes",
    "UNTRAINED": "aworld_core.worker.outcomes",
    "outcome_record": "aworld_core.worker.records",
    "trained_records": "aworld_core.worker.records",
    "first_record_error": "aworld_core.worker.records",
    "merge_step_metrics": "aworld_core.worker.records",
    "mask_runs": "aworld_core.worker.records",
    "mask_of_runs": "aworld_core.worker.records",
    "tool_counts": "aworld_core.worker.records",
    "Rendezvous": "aworld_core.worker.rendezvous",
    "group_decider": "aworld_core.worker.rendezvous",
    "Member": "aworld_core.worker.rendezvous",
    "PoolScorer": "aworld_core.worker.scoring",
    "shutdown_pools": "aworld_core.worker.scoring",
    "EpisodeRunner": "aworld_core.worker.episodes",
    "EpisodeGroup": "aworld_core.worker.episodes",
    "apply_group_policy": "aworld_core.worker.episodes",
    "notify_episode_end": "aworld_core.worker.episodes",
    "GroupPolicy": "aworld_core.worker.policy",
    "FailedSteps": "aworld_core.worker.policy",
    "untrainable_reason": "aworld_core.worker.policy",
    "is_trainable": "aworld_core.worker.policy",
    "step_metrics": "aworld_core.worker.policy",
    "first_error": "aworld_core.worker.policy",
    "error_of": "aworld_core.worker.policy",
    "stop_error_in": "aworld_core.worker.policy",
    "views_to_batch": "aworld_core.worker.batch",
    "episodes_to_batch": "aworld_core.worker.batch",
    "episode_segments": "aworld_core.worker.credit",
    "segment_advantages": "aworld_core.worker.credit",
    "segment_rewards": "aworld_core.worker.credit",
    "set_segment_rewards": "aworld_core.worker.credit",
    "segment_rows": "aworld_core.worker.credit",
    "SegmentRow": "aworld_core.worker.credit",
    "check_token_mean": "aworld_core.worker.credit",
    "has_segment_rewards": "aworld_core.worker.credit",
    "group_advantages": "aworld_core.worker.batch",
    "group_statistics": "aworld_core.worker.batch",
    "token_logprobs": "aworld_core.worker.batch",
    "policy_gradient_loss": "aworld_core.worker.batch",
    # a synchronous framework's worker runs the async episode code on one loop thread, and closes
    # the MCP sessions its episodes shared when it stops
    "LoopThread": "aworld_core.runtime.loop_thread",
    "close_shared_sessions": "aworld_core.tools.mcp_shared",
    "closing_shared_sessions": "aworld_core.tools.mcp_shared",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
