"""Llama-3.1's parser on a turn decoded with its sampled end token (issue: a trailing <|eom_id|>
after an ipython call was read as a second, nameless call, and the episode failed with the
template's "This model only supports single tool-calls at once!")."""

from __future__ import annotations

import pytest

from aworld_core.tokens.parsers.llama import Llama3JsonParser


@pytest.mark.parametrize("end", ["<|eom_id|>", "<|eot_id|>", "<|eom_id|>\n", ""])
@pytest.mark.parametrize(
    ("body", "name", "arguments"),
    [
        ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', "get_weather", '{"city": "Paris"}'),
        ('<|python_tag|>brave_search.call(query="penguins")', "brave_search", '{"query": "penguins"}'),
        ('{"name": "get_weather", "parameters": {"city": "Paris"}}', "get_weather", '{"city": "Paris"}'),
    ],
)
def test_a_trailing_end_token_is_not_a_second_call(body, name, arguments, end):
    parsed = Llama3JsonParser().parse(body + end)
    assert [(c.name, c.arguments, c.error) for c in parsed.tool_calls] == [(name, arguments, None)]
    assert parsed.content == ""


def test_plain_content_loses_only_its_end_token():
    assert Llama3JsonParser().parse("It is sunny.<|eot_id|>").content == "It is sunny."
