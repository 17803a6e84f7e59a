"""The worker kit: the worker half of every backend, written once.

A backend's worker (a TRL trainer, a verl agent-loop worker, an AReaL rollout worker, an
ms-swift scheduler, the task service) does the same things in the same order:

1. ``load_job`` / ``build_agent``: the job from its serialized config, the agent once per process;
2. ``build_token_llm``: the token-level client over the framework's engine (one rule for the chat
   template, the tool parser and the limits);
3. ``EpisodeRunner``: episodes or GRPO groups through the ``rollout`` hook, every failure
   recorded, scored, the group policy applied, ``on_episode_end`` once;
4. ``episodes_to_batch`` / ``views_to_batch`` / ``group_advantages``: training segments to the
   tensors of a step, one row per segment, credited by ``worker.credit``'s rule;
5. ``FailedSteps`` / ``step_metrics`` / ``StepRecorder``: per-step failure counts, the reasons
   and their log lines, and a stop after N all-failed steps;
6. ``WorkerCache`` / ``Rendezvous``: per-process state keyed by the job, and GRPO groups for
   frameworks that run one member per call.

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
    "WorkerCache": "aworld_core.worker.cache",
    "shared_tokenizer": "aworld_core.worker.cache",
    "StepRecorder": "aworld_core.worker.outcomes",
    "outcome_reason": "aworld_core.worker.outcomes",
    "describe": "aworld_core.worker.outcomes",
    "Rendezvous": "aworld_core.worker.rendezvous",
    "group_decider": "aworld_core.worker.rendezvous",
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
    "views_to_batch": "aworld_core.worker.batch",
    "episodes_to_batch": "aworld_core.worker.batch",
    "episode_segments": "aworld_core.worker.credit",
    "segment_advantages": "aworld_core.worker.credit",
    "segment_rewards": "aworld_core.worker.credit",
    "set_segment_rewards": "aworld_core.worker.credit",
    "segment_rows": "aworld_core.worker.credit",
    "SegmentRow": "aworld_core.worker.credit",
    "check_token_mean": "aworld_core.worker.credit",
    "group_advantages": "aworld_core.worker.batch",
    "group_statistics": "aworld_core.worker.batch",
    "token_logprobs": "aworld_core.worker.batch",
    "policy_gradient_loss": "aworld_core.worker.batch",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
