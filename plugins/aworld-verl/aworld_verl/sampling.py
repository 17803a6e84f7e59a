"""verl's ``sampling_params`` dict <-> the core's ``SamplingParams``.

verl's agent-loop worker builds one dict per sample (``temperature``, ``top_p``, ``top_k``,
``repetition_penalty``, ``logprobs``; for validation the ``val_kwargs`` values, for REMAX's
greedy rows temperature 0). The loop turns it into ``SamplingParams`` so it overrides the trained
agent's own settings for that episode, and the engine turns each call's ``SamplingParams`` back
into the dict verl's rollout servers (vLLM, SGLang) accept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import SamplingParams
from aworld_core.tokens import LOGPROBS_MODE, STOP_TOKEN_IDS

# verl keys that map onto SamplingParams fields; every other key travels in ``extra``
_FIELDS = ("temperature", "top_p", "top_k", "max_tokens", "stop", "seed")
# keys the loop decides itself: logprobs are always requested (RL needs them), and
# ``max_new_tokens`` is SGLang's name for max_tokens
_HANDLED = {"logprobs", "max_new_tokens"}
# core-only extras that mean nothing to verl's servers (the rollout config sets logprobs_mode)
_CORE_ONLY = {LOGPROBS_MODE}


def _plain(value: Any) -> Any:
    """numpy scalars (verl's non-tensor batch is numpy) as Python numbers."""
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, (list, tuple, dict, str)):
        try:
            return item()
        except (TypeError, ValueError):
            return value
    return value


def sampling_from_verl(params: Mapping[str, Any] | None) -> SamplingParams:
    """The ``SamplingParams`` of verl's per-sample dict (``None`` values mean "engine default")."""
    if params is None:
        return SamplingParams()
    if not isinstance(params, Mapping):
        raise UsageError(f"verl sampling_params must be a dict, got {type(params).__name__}")
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, raw in params.items():
        value = _plain(raw)
        if key in _FIELDS:
            if key == "stop" and isinstance(value, str):
                value = [value]
            fields[key] = value
        elif key == "max_new_tokens":
            fields.setdefault("max_tokens", value)
        elif key in _HANDLED or value is None:
            continue
        else:
            extra[key] = value
    try:
        return SamplingParams(**fields, extra=extra)
    except ValueError as exc:
        raise UsageError(f"verl sampling_params {dict(params)!r} are not valid sampling settings: {exc}") from exc


def verl_sampling_params(sampling: SamplingParams) -> dict[str, Any]:
    """The dict for ``server_manager.generate(sampling_params=...)``: only set fields, logprobs on.

    ``max_tokens`` is left out when unset so verl's server applies its own cap (the remaining
    ``prompt_length + response_length`` budget).
    """
    params: dict[str, Any] = {}
    for key in _FIELDS:
        value = getattr(sampling, key)
        if value is not None:
            params[key] = list(value) if key == "stop" else value
    for key, value in sampling.extra.items():
        if key in _CORE_ONLY or value is None:
            continue
        if key == STOP_TOKEN_IDS:
            value = [int(v) for v in value]
            if not value:
                continue
        params[key] = value
    params["logprobs"] = True
    return params
