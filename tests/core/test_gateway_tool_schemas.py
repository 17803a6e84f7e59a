"""A tool schema the gateway cannot use is the client's mistake: a 400 naming 'tools', before
anything is sampled -- not a 500 after the turn was sampled (the parser and the strict-schema
check read ``parameters`` once the model has answered)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from aworld_core.gateway import Gateway
from aworld_core.testing import assistant_turn_text, load_template
from aworld_core.tokens import ScriptedTokenEngine, TokenLLM

pytest_plugins = ["aworld_core.testing.fixtures"]

CALL = {"id": "c0", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}


@pytest.fixture
def client(tiny_tokenizer):
    template = load_template("qwen2_5")
    turn = assistant_turn_text(tiny_tokenizer, template, {"role": "assistant", "content": "", "tool_calls": [CALL]})
    ids = tiny_tokenizer.encode(turn, add_special_tokens=False)
    engine = ScriptedTokenEngine(lambda prompt, sampling, request_id: list(ids))
    llm = TokenLLM(engine, tiny_tokenizer, chat_template=template, model_name="m")
    return TestClient(Gateway(llm).app, raise_server_exceptions=False), engine


BAD = {
    "parameters not an object": {"name": "f", "parameters": "oops"},
    "properties not an object": {"name": "f", "parameters": {"type": "object", "properties": 5}},
    "strict, not a JSON schema": {"name": "f", "strict": True, "parameters": {"type": "objectx"}},
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_tool_schema_is_a_400_before_sampling(client, case):
    http, engine = client
    chat = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": BAD[case]}]},
    )
    assert chat.status_code == 400, chat.text
    assert chat.json()["error"]["param"] == "tools"
    responses = http.post("/v1/responses", json={"input": "hi", "tools": [{"type": "function", **BAD[case]}]})
    assert responses.status_code == 400, responses.text
    assert responses.json()["error"]["param"] == "tools"
    assert not engine.calls  # refused before anything was sampled


def test_good_tool_schema_still_answers_with_the_call(client):
    http, _ = client
    tool = {"name": "f", "strict": True, "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}
    chat = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": tool}]},
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "f"
