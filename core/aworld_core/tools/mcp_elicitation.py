"""Answers to a server's ``elicitation/create`` (it asks the user for input), by policy.

An agent in a training job has no person to ask, so the client declares the capability (servers
that need it then ask instead of failing) and answers each request by the server's
``elicitation`` policy: ``decline`` (the default), ``cancel``, or ``accept_defaults`` (a form
accepted with its schema's defaults, declined when a required field has none; a URL request is
always declined: nobody can open it). Every request is recorded (``record``) with the tool call
it came in, in the trajectory's ``ActionResult.elicitations``.

How a server asks depends on the protocol era the client and server negotiated (the SDK's
``Client`` probes ``server/discover`` and falls back to the ``initialize`` handshake):

- 2026 (stateless): the server answers the ``tools/call`` with an ``input_required`` result
  carrying its ``elicitation/create`` requests; the SDK calls our callback for each and retries
  the call with the answers (``mcp.client._input_required``; ``mcp_direct`` hands such a call to
  the SDK). A 2026 request has no back-channel, so a server that sends its own
  ``elicitation/create`` mid-call (the SDK's ``ctx.elicit``) fails there, on the server:
  ``explain_no_back_channel`` says so in the tool's error.
- 2025 (``initialize``): the server sends ``elicitation/create`` as its own request on the call's
  response stream (stateful streamable HTTP, stdio); the SDK answers it through the same callback.
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


_NO_BACK_CHANNEL = "no back-channel for server-initiated requests"


def explain_no_back_channel(cause: str) -> str:
    """``cause`` with what it means when a server tried to send its own request (elicitation,
    sampling, roots) on a 2026 call, which has no channel for one: the server's bug, not ours."""
    if _NO_BACK_CHANNEL not in cause:
        return cause
    return (
        f"{cause} (the server sent its own request mid-call, which the 2026 protocol this client "
        "negotiated does not carry; a 2026 server asks for input by answering the call with an "
        "input_required result, which this client answers by its elicitation policy: in the "
        "Python SDK, a Resolve(...) parameter whose resolver returns Elicit(...) instead of ctx.elicit)"
    )
