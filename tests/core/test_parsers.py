"""Tool-call parsers: valid calls, every kind of malformed call, reasoning, the registry."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aworld_core.errors import UsageError
from aworld_core.tokens.parsers import (
    DeepSeekParser,
    Glm45Parser,
    HarmonyParser,
    HermesParser,
    Llama3JsonParser,
    MistralParser,
    Qwen3CoderParser,
    available_tool_parsers,
    get_tool_parser,
    is_valid_call_id,
    make_call_id,
    register_tool_parser,
    split_reasoning,
)


def args(call) -> dict:
    return json.loads(call.arguments)


# -- hermes ----------------------------------------------------------------------------------


def test_hermes_content_and_calls():
    text = (
        'Let me check.\n<tool_call>\n{"name": "search", "arguments": {"q": "paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "calc", "arguments": {"expr": "1+1"}}\n</tool_call>'
    )
    parsed = HermesParser().parse(text, id_prefix="call_x_0_")
    assert parsed.content == "Let me check."
    assert [(c.id, c.name, args(c), c.error) for c in parsed.tool_calls] == [
        ("call_x_0_0", "search", {"q": "paris"}, None),
        ("call_x_0_1", "calc", {"expr": "1+1"}, None),
    ]


def test_hermes_plain_text_has_no_calls():
    parsed = HermesParser().parse("  The answer is 5.  ")
    assert parsed.content == "The answer is 5." and parsed.tool_calls == []


def test_hermes_arguments_given_as_a_json_string_are_accepted():
    parsed = HermesParser().parse('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>')
    assert parsed.tool_calls[0].error is None and args(parsed.tool_calls[0]) == {"a": 1}


@pytest.mark.parametrize(
    ("body", "name", "error"),
    [
        ('{"name": "calc", "arguments": {"expr": 2+}', "calc", "not valid JSON"),
        ('{"arguments": {}}', "", "no string 'name'"),
        ('["calc"]', "", "must be a JSON object"),
        ('{"name": "calc", "arguments": [1, 2]}', "calc", "must be a JSON object, got list"),
        ('{"name": "calc", "arguments": "not json"}', "calc", "not JSON"),
    ],
)
def test_hermes_malformed_calls_become_errors(body, name, error):
    parsed = HermesParser().parse(f"before <tool_call>\n{body}\n</tool_call> after")
    assert parsed.content == "before  after"
    (call,) = parsed.tool_calls
    assert call.name == name and error in call.error and call.arguments == body


def test_hermes_unclosed_call_is_an_error_not_a_crash():
    parsed = HermesParser().parse('Sure.\n<tool_call>\n{"name": "calc", "argu')
    (call,) = parsed.tool_calls
    assert call.name == "calc" and "not closed" in call.error
    assert parsed.content == "Sure."


def test_hermes_good_and_bad_calls_in_one_turn_keep_their_order():
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{oops}</tool_call>'
    parsed = HermesParser().parse(text)
    assert [(c.id, c.error is None) for c in parsed.tool_calls] == [("call_0", True), ("call_1", False)]


# -- llama3_json -----------------------------------------------------------------------------


def test_llama3_json_call():
    parsed = Llama3JsonParser().parse('{"name": "calc", "parameters": {"expr": "6*7"}}')
    (call,) = parsed.tool_calls
    assert parsed.content == "" and call.name == "calc" and args(call) == {"expr": "6*7"} and call.error is None


def test_llama3_json_several_calls_and_python_tag():
    text = '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "arguments": {"y": "; not a split"}}'
    parsed = Llama3JsonParser().parse(text)
    assert [(c.name, args(c)) for c in parsed.tool_calls] == [("a", {"x": 1}), ("b", {"y": "; not a split"})]


def test_llama3_json_plain_text_is_content():
    parsed = Llama3JsonParser().parse("The answer is {probably} 42.")
    assert parsed.content == "The answer is {probably} 42." and parsed.tool_calls == []


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"name": "calc", "parameters": {"expr": ', "not valid JSON"),
        ('{"name": "calc", "parameters": {}} and then some words', "unexpected text"),
        ('{"parameters": {}}', "no string 'name'"),
    ],
)
def test_llama3_json_malformed(text, error):
    parsed = Llama3JsonParser().parse(text)
    assert any(c.error and error in c.error for c in parsed.tool_calls)


# -- qwen3_coder -----------------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "write",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}}},
        },
    }
]


def test_qwen3_coder_typed_by_schema():
    text = (
        "Writing.\n<tool_call>\n<function=write>\n<parameter=path>\n007\n</parameter>\n"
        "<parameter=lines>\n12\n</parameter>\n</function>\n</tool_call>"
    )
    parsed = Qwen3CoderParser().parse(text, tools=TOOLS)
    (call,) = parsed.tool_calls
    assert parsed.content == "Writing." and call.name == "write"
    assert args(call) == {"path": "007", "lines": 12}  # "007" stays text: the schema says string


def test_qwen3_coder_without_schema_decodes_json_looking_values():
    text = "<tool_call><function=f><parameter=n>3</parameter><parameter=s>hi there</parameter></function></tool_call>"
    (call,) = Qwen3CoderParser().parse(text).tool_calls
    assert args(call) == {"n": 3, "s": "hi there"}


def test_qwen3_coder_malformed():
    (call,) = Qwen3CoderParser().parse("<tool_call>write path=x</tool_call>").tool_calls
    assert call.error and "<function=name>" in call.error


# -- reasoning -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reasoning", "rest"),
    [
        ("<think>\nhmm\n</think>\n\nanswer", "hmm", "answer"),
        ("<think>\nstill thinking when it stopped", "still thinking when it stopped", ""),
        ("no thinking here", None, "no thinking here"),
        ("hmm</think>answer", None, "hmm</think>answer"),  # no <think>, no family that opens one
    ],
)
def test_split_reasoning(text, reasoning, rest):
    assert split_reasoning(text) == (reasoning, rest)


@pytest.mark.parametrize(
    ("text", "reasoning", "rest"),
    [
        ("hmm</think>answer", "hmm", "answer"),  # the opening tag was in the generation prompt
        ("<think>a</think>b", "a", "b"),
        ("answer without reasoning", None, "answer without reasoning"),
        # a </think> after the call marker is inside the call's arguments: the text stays whole
        ('ok <tool_call>{"name": "f", "arguments": {"q": "</think>"}}</tool_call>', None,
         'ok <tool_call>{"name": "f", "arguments": {"q": "</think>"}}</tool_call>'),
        ('r</think><tool_call>{"name": "f", "arguments": {"q": "</think>"}}</tool_call>', "r",
         '<tool_call>{"name": "f", "arguments": {"q": "</think>"}}</tool_call>'),
    ],
)
def test_split_reasoning_when_the_prompt_opens_think(text, reasoning, rest):
    assert split_reasoning(text, opened_by_prompt=True, call_markers=("<tool_call>",)) == (reasoning, rest)


# -- registry --------------------------------------------------------------------------------


def test_registry():
    assert {"hermes", "llama3_json", "qwen3_coder", "mistral", "deepseek_v3", "deepseek_r1", "harmony", "gpt_oss",
            "glm45"} <= set(available_tool_parsers())
    assert isinstance(get_tool_parser("hermes"), HermesParser)
    assert isinstance(get_tool_parser("aworld_core.tokens.parsers:Llama3JsonParser"), Llama3JsonParser)
    with pytest.raises(UsageError, match="unknown tool parser 'nope'; choose one of"):
        get_tool_parser("nope")
    with pytest.raises(UsageError, match="already registered"):
        register_tool_parser("hermes", HermesParser)


def test_register_a_parser():
    class Shout:
        def parse(self, text, *, tools=None, id_prefix="call_"):
            return HermesParser().parse(text.upper(), tools=tools, id_prefix=id_prefix)

    register_tool_parser("test_shout", Shout, replace=True)
    assert get_tool_parser("test_shout").parse("hi").content == "HI"


# -- mistral ---------------------------------------------------------------------------------


def test_mistral_v3_list_keeps_valid_model_ids_and_makes_the_rest():
    text = (
        '[TOOL_CALLS] [{"name": "a", "arguments": {"x": "é🎉"}, "id": "abcDEF123"}, '
        '{"name": "b", "arguments": "{\\"y\\": 2}", "id": "too-long-id"}, {"name": "c", "arguments": {}, "id": "abcDEF123"}]'
    )
    calls = MistralParser().parse(text, id_prefix="call_s_1_").tool_calls
    assert [(c.name, args(c), c.error) for c in calls] == [("a", {"x": "é🎉"}, None), ("b", {"y": 2}, None), ("c", {}, None)]
    assert calls[0].id == "abcDEF123"
    assert calls[1].id == make_call_id("call_s_1_", 1, "alnum9") and is_valid_call_id(calls[1].id, "alnum9")
    assert calls[2].id != "abcDEF123" and is_valid_call_id(calls[2].id, "alnum9")  # a repeated id is replaced


def test_mistral_v11_forms_and_content():
    text = 'Sure.[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{"tz": "UTC"}[TOOL_CALLS]add[ARGS]{"a": {"b": [1, 2]}}'
    parsed = MistralParser().parse(text, id_prefix="p_")
    assert parsed.content == "Sure."
    assert [(c.id, c.name, args(c)) for c in parsed.tool_calls] == [
        ("a1b2c3d4e", "get_time", {"tz": "UTC"}),
        (make_call_id("p_", 1, "alnum9"), "add", {"a": {"b": [1, 2]}}),
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('[TOOL_CALLS] [{"name": "a", "arguments": {"x": }]', "not valid JSON"),
        ('[TOOL_CALLS] [{"name": "a", "arguments": {}}] trailing', "unexpected text after"),
        ("[TOOL_CALLS] []", "empty"),
        ('[TOOL_CALLS]calc{"a": 1}', "no [ARGS]"),
        ('[TOOL_CALLS]calc[ARGS]{"a": ', "not valid JSON"),
        ('[TOOL_CALLS]calc[ARGS]{"a": 1} and more', "unexpected text"),
        ("[TOOL_CALLS][ARGS]{}", "no name"),
        ('[TOOL_CALLS]calc[ARGS][1, 2]', "must be a JSON object"),
    ],
)
def test_mistral_malformed_calls_are_errors(text, error):
    calls = MistralParser().parse(text).tool_calls
    assert calls and any(c.error and error in c.error for c in calls), [c.error for c in calls]


# -- deepseek --------------------------------------------------------------------------------

B, E, CB, CE, SEP = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def test_deepseek_r1_json_blocks_and_v31_form():
    text = (
        f'Let me check.{B}{CB}function{SEP}get_weather\n```json\n{{"city": "東京"}}\n```{CE}\n'
        f'{CB}get_time{SEP}{{"tz": "UTC"}}{CE}{E}'
    )
    parsed = DeepSeekParser().parse(text, id_prefix="c_")
    assert parsed.content == "Let me check."
    assert [(c.id, c.name, args(c), c.error) for c in parsed.tool_calls] == [
        ("c_0", "get_weather", {"city": "東京"}, None),
        ("c_1", "get_time", {"tz": "UTC"}, None),
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (f'{B}{CB}function{SEP}f\n```json\n{{"a": 1', "not closed"),
        (f"{B}{CB}function{SEP}f\n{{}}{CE}{E}", "```json"),
        (f'{B}{CB}function{SEP}f\n```json\n{{"a": }}\n```{CE}{E}', "not valid JSON"),
        (f"{B}{CB}f{{}}{CE}{E}", "no <｜tool▁sep｜>"),
        (f"{B}oops{E}", "not a"),
        (f'{B}{CB}function{SEP}f\n```json\n{{"a": 1}}{CE}{E}', "not closed"),
    ],
)
def test_deepseek_malformed_calls_are_errors(text, error):
    calls = DeepSeekParser().parse(text).tool_calls
    assert calls and any(c.error and error in c.error for c in calls), [c.error for c in calls]


def test_deepseek_text_after_the_calls_stays_content():
    parsed = DeepSeekParser().parse(f"A{B}{CB}x{SEP}{{}}{CE}{E}B")
    assert parsed.content == "A\nB" and parsed.tool_calls[0].name == "x"


# -- harmony ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}',
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>',
    ],
)
def test_harmony_call_in_both_header_forms(call):
    parsed = HarmonyParser().parse("<|channel|>analysis<|message|>Need weather.<|end|>" + call, id_prefix="h_")
    assert parsed.reasoning == "Need weather." and parsed.content == ""
    assert [(c.id, c.name, args(c), c.error) for c in parsed.tool_calls] == [("h_0", "get_weather", {"city": "Paris"}, None)]


def test_harmony_final_and_plain_text():
    text = "<|channel|>analysis<|message|>Greeting.<|end|><|start|>assistant<|channel|>final<|message|>Hello 🎉"
    parsed = HarmonyParser().parse(text)
    assert (parsed.content, parsed.reasoning, parsed.tool_calls) == ("Hello 🎉", "Greeting.", [])
    assert HarmonyParser().parse("Hello <b>there</b>.").content == "Hello <b>there</b>."
    stopped = HarmonyParser().parse("<|channel|>final<|message|>Hi.<|end|><|start|>assistant<|channel|>")
    assert (stopped.content, stopped.tool_calls) == ("Hi.", [])  # stopped in the next header: nothing more


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": ', "not closed"),
        ("<|channel|>commentary to=functions.f <|constrain|>json<|message|>not json<|call|>", "not valid JSON"),
        ("<|channel|>commentary to=functions.f <|constrain|>", "stopped before its arguments"),
    ],
)
def test_harmony_malformed_calls_are_errors(text, error):
    (call,) = HarmonyParser().parse(text).tool_calls
    assert call.name == "f" and error in call.error


# -- glm45 -----------------------------------------------------------------------------------


def test_glm45_typed_by_schema():
    text = (
        "Writing.\n<tool_call>write\n<arg_key>path</arg_key>\n<arg_value>007</arg_value>\n"
        '<arg_key>lines</arg_key>\n<arg_value>12</arg_value>\n<arg_key>meta</arg_key>\n<arg_value>{"a": [1]}</arg_value>\n</tool_call>'
    )
    parsed = Glm45Parser().parse(text, tools=TOOLS)
    (call,) = parsed.tool_calls
    assert parsed.content == "Writing." and call.name == "write" and call.error is None
    assert args(call) == {"path": "007", "lines": 12, "meta": {"a": [1]}}


@pytest.mark.parametrize(
    ("body", "error"),
    [("<arg_key>a</arg_key><arg_value>1</arg_value>", "function name"), ("f\n<arg_key>a</arg_key>oops", "pairs")],
)
def test_glm45_malformed(body, error):
    (call,) = Glm45Parser().parse(f"<tool_call>{body}</tool_call>").tool_calls
    assert error in call.error


# -- llama builtin ---------------------------------------------------------------------------


def test_llama3_python_tag_builtin_call_and_content_before():
    parsed = Llama3JsonParser().parse('Searching.<|python_tag|>brave_search.call(query="weather in Paris", n=3)')
    (call,) = parsed.tool_calls
    assert parsed.content == "Searching." and call.name == "brave_search" and call.error is None
    assert args(call) == {"query": "weather in Paris", "n": 3}


@pytest.mark.parametrize("body", ["brave_search.call(query=oops(", "brave_search.call('positional')", "print(1)"])
def test_llama3_malformed_builtin_call(body):
    (call,) = Llama3JsonParser().parse("<|python_tag|>" + body).tool_calls
    assert call.error


# -- ids -------------------------------------------------------------------------------------


def test_call_ids_are_deterministic_in_each_format():
    alnum = make_call_id("call_abc_3_", 1, "alnum9")
    assert alnum == make_call_id("call_abc_3_", 1, "alnum9") and is_valid_call_id(alnum, "alnum9")
    assert alnum != make_call_id("call_abc_3_", 2, "alnum9")
    assert make_call_id("call_abc_3_", 1) == "call_abc_3_1"
    assert get_tool_parser("hermes", id_format="alnum9").parse(
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>', id_prefix="x_"
    ).tool_calls[0].id == make_call_id("x_", 0, "alnum9")
    assert get_tool_parser("mistral", id_format="prefix").id_format == "prefix"
    with pytest.raises(UsageError, match="unknown tool-call id format 'uuid'"):
        get_tool_parser("hermes", id_format="uuid")

    class NoIds:
        def parse(self, text, *, tools=None, id_prefix="call_"):
            return HermesParser().parse(text)

    with pytest.raises(UsageError, match="has no tool-call id format"):
        get_tool_parser(NoIds(), id_format="alnum9")


# -- never crash -----------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=20),
            st.sampled_from(["<tool_call>", "</tool_call>", "{", "}", '"name"', ":", '"arguments"', "<think>",
                             "</think>", "<function=f>", "<parameter=p>", "</parameter>", "</function>", ";",
                             "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[", "]", B, E, CB, CE, SEP, "function", "\n```json\n",
                             "```", "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>",
                             " to=functions.f", "analysis", "final", "<arg_key>", "</arg_key>", "<arg_value>",
                             "</arg_value>", "<|python_tag|>", "f.call(", ")", '"', "q=1"]),
        ),
        max_size=25,
    )
)
def test_no_text_crashes_a_parser(pieces):
    text = "".join(pieces)
    for name in ("hermes", "llama3_json", "qwen3_coder", "mistral", "deepseek_v3", "harmony", "glm45"):
        parsed = get_tool_parser(name).parse(split_reasoning(text)[1])
        for call in parsed.tool_calls:
            if call.error is None:
                assert isinstance(json.loads(call.arguments), dict) and call.name
