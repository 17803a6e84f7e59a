"""The OpenAI-compatible gateway in front of a ``TokenLLM``: agents written against the OpenAI API
become trainable unchanged, with every episode's exact tokens recorded."""

from aworld_core.gateway.app import SESSION_HEADER, Gateway, GatewayRequestError, sampling_from_body
from aworld_core.gateway.failures import CallFailure, FinishedSession
from aworld_core.gateway.fields import parse_chat
from aworld_core.gateway.server import (
    GatewayServer,
    current_gateway_server,
    get_llm_server_address,
    get_llm_server_model_name,
    serve_gateway,
)

__all__ = [
    "SESSION_HEADER",
    "CallFailure",
    "FinishedSession",
    "Gateway",
    "GatewayRequestError",
    "GatewayServer",
    "current_gateway_server",
    "get_llm_server_address",
    "get_llm_server_model_name",
    "parse_chat",
    "sampling_from_body",
    "serve_gateway",
]
