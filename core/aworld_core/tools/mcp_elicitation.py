"""Answers to a server's ``elicitation/create`` (it asks the user for input), by policy.

An agent in a training job has no person to ask, so the client declares the capability (servers
that need it then ask instead of failing) and answers each request by the server's
``elicitation`` policy: ``decline`` (the default), ``cancel``, or ``accept_defaults`` (a form
accepted with its schema's defaults, declined when a required field has none; a URL request is
always declined: nobody can open it). Every request is recorded (``record``) with the tool call
it came in, in the trajectory's ``ActionResult.elicitations``.
"""

from __future__ import annotations

from typing import Any, Literal

Policy = Literal["decline", "cancel", "accept_defaults"]


def answer_elicitation(policy: Policy, params: Any) -> tuple[Any, dict[str, Any]]:
    """The ``ElicitResult`` for ``params`` under ``policy``, and what to record of the exchange."""
    from mcp_types import ElicitResult

    mode = getattr(params, "mode", "form") or "form"
    record: dict[str, Any] = {"message": params.message, "mode": mode, "policy": policy}
    if mode == "url":
        record["url"] = getattr(params, "url", None)
        action, content = ("cancel" if policy == "cancel" else "decline"), None
    else:
        schema = params.requested_schema
        schema = schema.model_dump(by_alias=True, exclude_none=True) if hasattr(schema, "model_dump") else dict(schema)
        record["requested_schema"] = schema
        action, content = _form_answer(policy, schema)
    record["action"] = action
    if content is not None:
        record["content"] = content
    return ElicitResult(action=action, content=content), record


def _form_answer(policy: Policy, schema: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    if policy == "decline":
        return "decline", None
    if policy == "cancel":
        return "cancel", None
    properties = schema.get("properties") or {}
    content = {name: spec["default"] for name, spec in properties.items() if isinstance(spec, dict) and "default" in spec}
    if any(name not in content for name in schema.get("required") or []):
        return "decline", None  # a required answer nobody can give
    return "accept", content
