"""Env deltas from the real assistant turn, several terminators per family, loud detection of
templates that drop or rewrite history, and the family options (issue 18).

Each template here is written for the test after the published family it is named for (gpt-oss
harmony, Llama-3.1 with builtin tools, DeepSeek-R1, Phi-4, Gemma-3, GLM-4.5, Mistral v3), cut to
what the case needs. The tokenizer is the kit's tiny one plus those families' special tokens. A
``ScriptedTokenEngine`` plays what the model samples. Every check compares against the template's
own render of the conversation, id for id.
"""

from __future__ import annotations

import json
import re

import pytest

from aworld_core.errors import EpisodeInputError, UsageError
from aworld_core.schemas import ToolCall
from aworld_core.testing import build_tiny_tokenizer
from aworld_core.tokens import ScriptedTokenEngine, TokenLLM
from aworld_core.tokens.families import TemplateOptions, available_families, family_options
from aworld_core.tokens.messages import normalize_messages
from aworld_core.tokens.parsers import ParsedText

EXTRA_SPECIAL = [
    # harmony (gpt-oss)
    "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>",
    # DeepSeek
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
    # Phi-4, Gemma-3, GLM-4.5, Mistral
    "<|im_sep|>", "<start_of_turn>", "<end_of_turn>", "<|user|>", "<|assistant|>", "<|observation|>",
    "<|system|>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
    for name in ("get_weather", "calc")
]
QUESTION = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def tok():
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_tokens(EXTRA_SPECIAL, special_tokens=True)
    return tokenizer


def enc(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def render(tok, template: str, messages, *, generation_prompt: bool, json_arguments: bool = False, **kwargs) -> str:
    """The template's render of ``messages`` as TokenLLM gives them: arguments parsed to dicts, or
    as JSON text for families that want strings."""
    messages = normalize_messages(messages)
    if json_arguments:
        for m in messages:
            for c in m.get("tool_calls") or []:
                c["function"]["arguments"] = json.dumps(c["function"]["arguments"], ensure_ascii=False)
    return tok.apply_chat_template(
        messages, tools=TOOLS, chat_template=template, add_generation_prompt=generation_prompt, tokenize=False, **kwargs
    )


def sampled_runs(view) -> list[list[int]]:
    runs, current = [], []
    for token, mask in zip(view.response_ids, view.response_mask, strict=True):
        if mask:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    return [*runs, current] if current else runs


def env_runs(view) -> list[list[int]]:
    runs, current = [], []
    for token, mask in zip(view.response_ids, view.response_mask, strict=True):
        if not mask:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    return [*runs, current] if current else runs


class RegexParser:
    """A test parser: calls written as ``NAME(JSON)`` after a family's own call marker."""

    def __init__(self, pattern: str):
        self.pattern = re.compile(pattern, re.DOTALL)

    def parse(self, text, *, tools=None, id_prefix="call_"):
        calls = [
            ToolCall(id=f"{id_prefix}{i}", name=m.group("name"), arguments=m.group("args"))
            for i, m in enumerate(self.pattern.finditer(text))
        ]
        content = self.pattern.sub("", text)
        for tag in ("<|channel|>final<|message|>", "<|channel|>commentary<|message|>", "<｜tool▁calls▁begin｜>",
                    "<｜tool▁calls▁end｜>"):
            content = content.replace(tag, "")
        return ParsedText(content=content.strip(), tool_calls=calls)


# -- gpt-oss (harmony) --------------------------------------------------------------------------

HARMONY = """
{%- set ns = namespace(names=[], i=0) -%}
{%- for m in messages -%}
  {%- if m.role == 'system' or m.role == 'user' -%}
    {{- '<|start|>' + m.role + '<|message|>' + m.content + '<|end|>' -}}
  {%- elif m.role == 'assistant' and m.tool_calls -%}
    {%- if m.content -%}{{- '<|start|>assistant<|channel|>commentary<|message|>' + m.content + '<|end|>' -}}{%- endif -%}
    {%- set ns.names = m.tool_calls | map(attribute='function.name') | list -%}
    {%- set ns.i = 0 -%}
    {%- for c in m.tool_calls -%}
      {{- '<|start|>assistant to=functions.' + c.function.name + '<|channel|>commentary json<|message|>' -}}
      {{- c.function.arguments | tojson -}}
      {{- '<|call|>' -}}
    {%- endfor -%}
  {%- elif m.role == 'assistant' -%}
    {{- '<|start|>assistant<|channel|>final<|message|>' + m.content -}}
    {{- '<|return|>' if (loop.last and not add_generation_prompt) else '<|end|>' -}}
  {%- elif m.role == 'tool' -%}
    {{- '<|start|>functions.' + ns.names[ns.i] + ' to=assistant<|channel|>commentary<|message|>' + m.content + '<|end|>' -}}
    {%- set ns.i = ns.i + 1 -%}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}
"""
HARMONY_PARSER = RegexParser(r" to=functions\.(?P<name>\w+)<\|channel\|>commentary json<\|message\|>(?P<args>\{.*?\})")


async def test_gpt_oss_call_turn_gets_no_invented_call_and_a_tool_text_terminator_moves_nothing(tok):
    """Old code: a stand-in turn with the calls' names and empty arguments was rendered and cut at
    the first end-of-turn after it, so the env held an invented call (``{}`` arguments) or ran
    into the tool text, which here spells both ``<|return|>`` and ``<|end|>``."""
    call = enc(tok, ' to=functions.get_weather<|channel|>commentary json<|message|>{"q": "Paris"}<|call|>')
    answer = enc(tok, "<|channel|>final<|message|>Sunny, 20C.<|return|>")
    llm = TokenLLM(ScriptedTokenEngine([call, answer]), tok, chat_template=HARMONY, family="gpt-oss",
                   tool_parser=HARMONY_PARSER)
    assert {tok.convert_ids_to_tokens(i) for i in llm.renderer.stop_ids} == {"<|call|>", "<|return|>"}
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    assert [(c.name, json.loads(c.arguments)) for c in r1.tool_calls] == [("get_weather", {"q": "Paris"})]
    tool_text = "sunny <|return|> then <|end|> more"
    messages = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": tool_text}]
    r2 = await llm.chat(messages, TOOLS, session_id="ep")
    assert r2.content == "Sunny, 20C."
    view = llm.finish_session("ep")
    assert sampled_runs(view) == [call, answer]
    # the env is exactly the template's render after the call's own <|call|>: the tool turn and the
    # generation prompt, the terminator-looking tool text included, nothing invented
    fresh = render(tok, HARMONY, [*messages, r2.message()], generation_prompt=False)
    assert tok.decode([*view.prompt_ids, *view.response_ids]) == fresh
    (env,) = env_runs(view)
    assert tok.decode(env) == (
        f"<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>{tool_text}<|end|><|start|>assistant"
    )
    assert tok.decode(env).count("to=functions") == 0


async def test_gpt_oss_sampled_return_is_kept_where_history_renders_end(tiny_llm_return_case):
    tok, llm, first, second, messages = tiny_llm_return_case
    view = llm.finish_session("ep")
    assert sampled_runs(view) == [first, second]
    ret, end = tok.convert_tokens_to_ids("<|return|>"), tok.convert_tokens_to_ids("<|end|>")
    # the template renders <|end|> after a past final answer; the sampled <|return|> stands in
    # for it (trained as sampled) and the env starts after it: no <|end|> is added
    (env,) = env_runs(view)
    assert env[0] != end and tok.decode(env).startswith("<|start|>user<|message|>")
    fresh = enc(tok, render(tok, HARMONY, messages, generation_prompt=False))
    full = [*view.prompt_ids, *view.response_ids]
    at = len(view.prompt_ids) + len(first) - 1
    assert full[at] == ret and fresh[at] == end
    assert full[:at] + [end] + full[at + 1 :] == fresh


async def test_a_template_that_renders_only_the_first_call_is_refused(tok):
    """gpt-oss's published template takes one call per message: the second call's result would be
    headed with the first call's name."""
    first_only = HARMONY.replace("{%- for c in m.tool_calls -%}", "{%- for c in m.tool_calls[:1] -%}")
    two = enc(tok, ' to=functions.get_weather<|channel|>commentary json<|message|>{"q": "Paris"}<|end|>'
                   '<|start|>assistant to=functions.calc<|channel|>commentary json<|message|>{"q": "1"}<|call|>')
    llm = TokenLLM(ScriptedTokenEngine([two]), tok, chat_template=first_only, family="gpt-oss",
                   tool_parser=HARMONY_PARSER)
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    assert [c.name for c in r1.tool_calls] == ["get_weather", "calc"]
    results = [{"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in r1.tool_calls]
    with pytest.raises(EpisodeInputError, match=r"does not render every tool call of a turn \(2 calls: get_weather, calc\)"):
        await llm.chat([*QUESTION, r1.message(), *results], TOOLS, session_id="ep")


@pytest.fixture
async def tiny_llm_return_case(tok):
    first = enc(tok, "<|channel|>final<|message|>Hello.<|return|>")
    second = enc(tok, "<|channel|>final<|message|>Bye.<|return|>")
    llm = TokenLLM(ScriptedTokenEngine([first, second]), tok, chat_template=HARMONY, family="gpt-oss",
                   tool_parser=HARMONY_PARSER)
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    messages = [*QUESTION, r1.message(), {"role": "user", "content": "And tomorrow?"}]
    r2 = await llm.chat(messages, TOOLS, session_id="ep")
    return tok, llm, first, second, [*messages, r2.message()]


# -- Llama-3.1 with builtin tools (ipython) -------------------------------------------------------

LLAMA_IPYTHON = """
{{- '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n' -}}
{%- if builtin_tools is defined -%}{{- 'Environment: ipython\n' -}}{%- endif -%}
{{- 'Tools: ' + (tools | map(attribute='function.name') | join(', ')) + '<|eot_id|>' -}}
{%- for m in messages -%}
  {%- if m.role == 'assistant' and m.tool_calls -%}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n<|python_tag|>' -}}
    {%- for c in m.tool_calls -%}
      {{- '{"name": "' + c.function.name + '", "parameters": ' + (c.function.arguments | tojson) + '}' -}}
    {%- endfor -%}
    {{- '<|eom_id|>' if builtin_tools is defined else '<|eot_id|>' -}}
  {%- elif m.role == 'tool' -%}
    {{- '<|start_header_id|>ipython<|end_header_id|>\n\n' + m.content + '<|eot_id|>' -}}
  {%- else -%}
    {{- '<|start_header_id|>' + m.role + '<|end_header_id|>\n\n' + (m.content or '') + '<|eot_id|>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}
"""


async def test_llama_ipython_tool_turn_ends_with_the_sampled_eom_and_nothing_is_appended(tok):
    """Old code knew one end-of-turn token (<|eot_id|>) and appended it after the sampled <|eom_id|>."""
    call = enc(tok, '<|python_tag|>{"name": "calc", "parameters": {"q": "6*7"}}<|eom_id|>')
    answer = enc(tok, "42<|eot_id|>")
    llm = TokenLLM(ScriptedTokenEngine([call, answer]), tok, chat_template=LLAMA_IPYTHON, family="llama3.1-ipython",
                   chat_template_kwargs={"builtin_tools": ["code_interpreter"]})
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    assert r1.tool_calls[0].name == "calc" and r1.finish_reason == "tool_calls"
    eom, eot = tok.convert_tokens_to_ids("<|eom_id|>"), tok.convert_tokens_to_ids("<|eot_id|>")
    assert {eom, eot} <= set(llm.engine.calls[0].sampling.extra["stop_token_ids"])
    messages = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "42"}]
    r2 = await llm.chat(messages, TOOLS, session_id="ep")
    view = llm.finish_session("ep")
    assert sampled_runs(view) == [call, answer]
    fresh = render(tok, LLAMA_IPYTHON, [*messages, r2.message()], generation_prompt=False, builtin_tools=["x"])
    assert [*view.prompt_ids, *view.response_ids] == enc(tok, fresh)
    assert env_runs(view)[0][0] != eot  # the sampled <|eom_id|> closed the turn


# -- DeepSeek-R1 ----------------------------------------------------------------------------------

DEEPSEEK_R1 = """
{%- set ns = namespace(is_tool=false, is_output_first=true) -%}
{{- '<｜begin▁of▁sentence｜>' -}}
{%- for m in messages -%}
  {%- if m.role == 'user' -%}
    {%- if ns.is_tool -%}{{- '<｜tool▁outputs▁end｜>' -}}{%- endif -%}
    {%- set ns.is_tool = false -%}
    {{- '<｜User｜>' + m.content -}}
  {%- elif m.role == 'assistant' -%}
    {%- if ns.is_tool -%}{{- '<｜tool▁outputs▁end｜>' -}}{%- endif -%}
    {%- set ns.is_tool = false -%}
    {{- '<｜Assistant｜>' + (m.content or '') -}}
    {%- if m.tool_calls -%}
      {%- set ns.is_output_first = true -%}
      {{- '<｜tool▁calls▁begin｜>' -}}
      {%- for c in m.tool_calls -%}
        {{- '<｜tool▁call▁begin｜>function<｜tool▁sep｜>' + c.function.name + '\n```json\n' + c.function.arguments + '\n```<｜tool▁call▁end｜>' -}}
      {%- endfor -%}
      {{- '<｜tool▁calls▁end｜>' -}}
    {%- endif -%}
    {{- '<｜end▁of▁sentence｜>' -}}
  {%- elif m.role == 'tool' -%}
    {%- set ns.is_tool = true -%}
    {%- if ns.is_output_first -%}
      {{- '<｜tool▁outputs▁begin｜>' -}}
      {%- set ns.is_output_first = false -%}
    {%- endif -%}
    {{- '<｜tool▁output▁begin｜>' + m.content + '<｜tool▁output▁end｜>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if ns.is_tool -%}{{- '<｜tool▁outputs▁end｜>' -}}{%- endif -%}
{%- if add_generation_prompt -%}{{- '<｜Assistant｜>' -}}{%- endif -%}
"""
DEEPSEEK_PARSER = RegexParser(
    r"<｜tool▁call▁begin｜>function<｜tool▁sep｜>(?P<name>\w+)\n```json\n(?P<args>.*?)\n```<｜tool▁call▁end｜>"
)


def deepseek_call(tok, name: str, args: dict) -> list[int]:
    body = f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{json.dumps(args)}\n```<｜tool▁call▁end｜>"
    return enc(tok, f"<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜><｜end▁of▁sentence｜>")


async def test_deepseek_r1_second_batch_of_tool_outputs_opens_with_outputs_begin(tok):
    """Old code rendered a stand-in turn without tool calls, so the template never reopened the
    outputs block and the second batch lacked <｜tool▁outputs▁begin｜>."""
    script = [deepseek_call(tok, "calc", {"q": "1+1"}), deepseek_call(tok, "calc", {"q": "2+2"}),
              enc(tok, "Both done.<｜end▁of▁sentence｜>")]
    llm = TokenLLM(ScriptedTokenEngine(script), tok, chat_template=DEEPSEEK_R1, family="deepseek-r1",
                   tool_parser=DEEPSEEK_PARSER)
    messages = list(QUESTION)
    for result in ("2", "4", None):
        response = await llm.chat(messages, TOOLS, session_id="ep")
        messages.append(response.message())
        if result is not None:
            messages.append({"role": "tool", "tool_call_id": response.tool_calls[0].id, "content": result})
    view = llm.finish_session("ep")
    assert sampled_runs(view) == script
    fresh = render(tok, DEEPSEEK_R1, messages, generation_prompt=False, json_arguments=True)
    assert [*view.prompt_ids, *view.response_ids] == enc(tok, fresh)
    assert [tok.decode(run).startswith("<｜tool▁outputs▁begin｜>") for run in env_runs(view)] == [True, True]


async def test_deepseek_arguments_as_dict_break_the_template_and_json_strings_fix_it(tok):
    """DeepSeek's templates concatenate the arguments as text: a dict is refused, naming the template."""
    script = [deepseek_call(tok, "calc", {"q": "1+1"}), enc(tok, "2.<｜end▁of▁sentence｜>")]
    llm = TokenLLM(ScriptedTokenEngine(script), tok, chat_template=DEEPSEEK_R1, family="deepseek-r1",
                   tool_parser=DEEPSEEK_PARSER, template_options={"tool_arguments": "dict"})
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    messages = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "2"}]
    with pytest.raises(EpisodeInputError, match=r"family deepseek-r1\) failed on this conversation: TypeError"):
        await llm.chat(messages, TOOLS, session_id="ep")
    assert family_options("deepseek-v3").tool_arguments == "json"


# -- Phi-4: a template that drops tool messages --------------------------------------------------

PHI4 = """
{%- for m in messages -%}
  {%- if m.role in ['system', 'user', 'assistant'] -%}
    {{- '<|im_start|>' + m.role + '<|im_sep|>' + (m.content or '') + '<|im_end|>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant<|im_sep|>' -}}{%- endif -%}
"""


async def test_phi4_dropping_a_tool_result_is_an_error_naming_the_template_and_role(tok):
    """Old code: the tool result silently vanished from the model's context and the training data."""
    call = enc(tok, '<tool_call>\n{"name": "calc", "arguments": {"q": "1+1"}}\n</tool_call><|im_end|>')
    llm = TokenLLM(ScriptedTokenEngine([call]), tok, chat_template=PHI4, family="phi4")
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    messages = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "two"}]
    with pytest.raises(EpisodeInputError, match=r"family phi4\) leaves out the content of a new 'tool' message"):
        await llm.chat(messages, TOOLS, session_id="ep")


async def test_a_first_prompt_whose_tool_result_the_template_drops_is_refused(tok):
    llm = TokenLLM(ScriptedTokenEngine([]), tok, chat_template=PHI4, family="phi4")
    history = [*QUESTION, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "calc", "arguments": {"q": "1"}}}]},
        {"role": "tool", "tool_call_id": "a", "content": "one"}]
    with pytest.raises(EpisodeInputError, match="leaves out the content of a new 'tool' message"):
        await llm.chat(history, TOOLS, session_id="ep")


async def test_phi4_with_tool_results_as_user_turns(tok):
    call = enc(tok, '<tool_call>\n{"name": "calc", "arguments": {"q": "1+1"}}\n</tool_call><|im_end|>')
    llm = TokenLLM(ScriptedTokenEngine([call, enc(tok, "2<|im_end|>")]), tok, chat_template=PHI4, family="phi4",
                   template_options={"tool_role": "user"})
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    messages = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "two"}]
    await llm.chat(messages, TOOLS, session_id="ep")
    (env,) = env_runs(llm.finish_session("ep"))
    assert tok.decode(env) == "<|im_start|>user<|im_sep|>two<|im_end|><|im_start|>assistant<|im_sep|>"


# -- Gemma-3: no tool role, alternation enforced ---------------------------------------------------

GEMMA3 = """
{{- '<bos>' if false else '' -}}
{%- for m in messages -%}
  {%- if (m.role == 'user') != (loop.index0 % 2 == 0) -%}
    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
  {%- endif -%}
  {{- '<start_of_turn>' + ('model' if m.role == 'assistant' else m.role) + '\n' + (m.content or '') -}}
  {%- for c in (m.tool_calls or []) -%}{{- '```tool_call\n' + (c.function | tojson) + '\n```' -}}{%- endfor -%}
  {{- '<end_of_turn>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}
"""
GEMMA_PARSER = RegexParser(r'```tool_call\n\{"name": "(?P<name>\w+)", "arguments": (?P<args>\{.*?\})\}\n```')


def gemma_two_calls(tok) -> list[int]:
    calls = "".join(
        '```tool_call\n' + json.dumps({"name": "calc", "arguments": {"q": q}}) + '\n```' for q in ("1", "2")
    )
    return enc(tok, calls + "<end_of_turn>")


async def test_a_template_that_raises_names_itself_and_its_condition(tok):
    llm = TokenLLM(ScriptedTokenEngine([gemma_two_calls(tok)]), tok, chat_template=GEMMA3, family="gemma3",
                   tool_parser=GEMMA_PARSER, template_options={"tool_role": "tool"})
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    results = [{"role": "tool", "tool_call_id": c.id, "content": f"r{i}"} for i, c in enumerate(r1.tool_calls)]
    with pytest.raises(EpisodeInputError) as caught:
        await llm.chat([*QUESTION, r1.message(), *results], TOOLS, session_id="ep")
    message = str(caught.value)
    assert "the given chat template (family gemma3) rejects this conversation" in message
    assert "Conversation roles must alternate user/assistant" in message


async def test_gemma3_tool_results_become_one_user_turn(tok):
    llm = TokenLLM(ScriptedTokenEngine([gemma_two_calls(tok), enc(tok, "3<end_of_turn>")]), tok,
                   chat_template=GEMMA3, family="gemma3", tool_parser=GEMMA_PARSER)
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    assert len(r1.tool_calls) == 2
    results = [{"role": "tool", "tool_call_id": c.id, "content": f"r{i}"} for i, c in enumerate(r1.tool_calls)]
    await llm.chat([*QUESTION, r1.message(), *results], TOOLS, session_id="ep")
    env = env_runs(llm.finish_session("ep"))[0]
    assert tok.decode(env) == "\n<start_of_turn>user\nr0\n\nr1<end_of_turn>\n<start_of_turn>model\n"


# -- GLM-4.5: the next role's token ends a turn ---------------------------------------------------

GLM45 = """
{{- '[gMASK]<sop>' -}}
{%- for m in messages -%}
  {%- if m.role == 'user' -%}{{- '<|user|>\n' + m.content -}}
  {%- elif m.role == 'assistant' -%}
    {{- '<|assistant|>\n' + (m.content or '') -}}
    {%- for c in (m.tool_calls or []) -%}
      {{- '\n<tool_call>' + c.function.name -}}
      {%- for k, v in c.function.arguments.items() -%}{{- '\n<arg_key>' + k + '</arg_key>\n<arg_value>' + v + '</arg_value>' -}}{%- endfor -%}
      {{- '\n</tool_call>' -}}
    {%- endfor -%}
  {%- elif m.role == 'tool' -%}
    {%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|observation|>' -}}{%- endif -%}
    {{- '\n<tool_response>\n' + m.content + '\n</tool_response>' -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|assistant|>' -}}{%- endif -%}
"""
GLM_PARSER = RegexParser(r"\n<tool_call>(?P<name>\w+)\n<arg_key>q</arg_key>\n<arg_value>(?P<args>[^<]*)</arg_value>\n</tool_call>")


class GlmParser(RegexParser):
    def parse(self, text, *, tools=None, id_prefix="call_"):
        parsed = super().parse(text, tools=tools, id_prefix=id_prefix)
        for call in parsed.tool_calls:
            call.arguments = json.dumps({"q": call.arguments})
        return parsed


async def test_glm_next_role_tokens_end_turns_and_are_not_repeated(tok):
    """Old code found no end-of-turn token in this template and could not be built."""
    call = enc(tok, "\nLet me look.\n<tool_call>get_weather\n<arg_key>q</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call><|observation|>")
    answer = enc(tok, "\nSunny.<|user|>")
    odd = enc(tok, "\nAsk me.<|observation|>")  # a role token that does not match what follows
    last = enc(tok, "\nOk.<|user|>")
    parser = GlmParser(GLM_PARSER.pattern.pattern)
    llm = TokenLLM(ScriptedTokenEngine([call, answer, odd, last]), tok, chat_template=GLM45, family="glm4.5",
                   tool_parser=parser)
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    assert r1.content == "Let me look." and r1.tool_calls[0].name == "get_weather"
    messages = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "sunny"}]
    r2 = await llm.chat(messages, TOOLS, session_id="ep")
    messages += [r2.message(), {"role": "user", "content": "Thanks. More?"}]
    r3 = await llm.chat(messages, TOOLS, session_id="ep")
    messages += [r3.message(), {"role": "user", "content": "Tomorrow?"}]
    r4 = await llm.chat(messages, TOOLS, session_id="ep")
    view = llm.finish_session("ep")
    assert sampled_runs(view) == [call, answer, odd, last]
    envs = [tok.decode(e) for e in env_runs(view)]
    assert envs[0] == "\n<tool_response>\nsunny\n</tool_response><|assistant|>"  # sampled <|observation|> not repeated
    assert envs[1] == "\nThanks. More?<|assistant|>"  # sampled <|user|> not repeated
    assert envs[2] == "<|user|>\nTomorrow?<|assistant|>"  # the user turn keeps its own role token
    # up to the odd turn the sequence is the template's render, id for id
    fresh = render(tok, GLM45, [*messages[:5], r3.message()], generation_prompt=False)
    full = [*view.prompt_ids, *view.response_ids]
    assert tok.decode(full).startswith(fresh) and r4.content == "Ok."


# -- templates that re-render history (Mistral v3 moves the tools block) ---------------------------

MISTRAL_V3 = """
{%- set users = messages | selectattr('role', 'equalto', 'user') | list -%}
{{- '<s>' -}}
{%- for m in messages -%}
  {%- if m.role == 'user' -%}
    {%- if tools and m is sameas users[-1] -%}{{- '[AVAILABLE_TOOLS]' + (tools | map(attribute='function.name') | join(',')) + '[/AVAILABLE_TOOLS]' -}}{%- endif -%}
    {{- '[INST] ' + m.content + ' [/INST]' -}}
  {%- elif m.role == 'assistant' -%}
    {{- (m.content or '') + '</s>' -}}
  {%- endif -%}
{%- endfor -%}
"""


async def _two_user_turns(tok, mode: str | None, question=QUESTION, tools=TOOLS):
    options = {"history_changes": mode} if mode else None
    script = [enc(tok, "Sunny.</s>"), enc(tok, "Rainy.</s>")]
    llm = TokenLLM(ScriptedTokenEngine(script), tok, chat_template=MISTRAL_V3, end_of_turn="</s>",
                   template_options=options)
    r1 = await llm.chat(question, tools, session_id="ep")
    messages = [*question, r1.message(), {"role": "user", "content": "And tomorrow?"}]
    return llm, messages, script


async def test_history_changes_restart_marks_the_episode_and_prompts_a_fresh_render(tok):
    llm, messages, script = await _two_user_turns(tok, "restart")
    await llm.chat(messages, TOOLS, session_id="ep")
    assert llm.engine.calls[1].prompt_ids == enc(tok, render(tok, MISTRAL_V3, messages, generation_prompt=True))
    view = llm.finish_session("ep")
    assert view.history_rewritten and view.response_ids == script[0]


async def test_history_changes_error_names_the_template(tok):
    llm, messages, _ = await _two_user_turns(tok, "error")
    with pytest.raises(EpisodeInputError, match="renders the earlier turns differently .* not prefix-stable"):
        await llm.chat(messages, TOOLS, session_id="ep")


async def test_history_changes_keep_refuses_a_template_that_moves_the_tools_block(tok):
    """Mistral v3 moves its tools block to the last user message: keeping the sequence the policy saw
    and placing the new turn's render after it trained the tools block twice (issue 28)."""
    llm, messages, _ = await _two_user_turns(tok, None)
    with pytest.raises(EpisodeInputError, match=r"moves the tools block .*train it twice"
                                                r".*history_changes='restart'"):
        await llm.chat(messages, TOOLS, session_id="ep")


async def test_history_changes_keep_refuses_the_move_when_an_earlier_turn_spells_the_terminator(tok):
    question = [{"role": "user", "content": "What does </s> mean?"}]
    llm, messages, _ = await _two_user_turns(tok, None, question)
    with pytest.raises(EpisodeInputError, match="train it twice"):
        await llm.chat(messages, TOOLS, session_id="ep")


async def test_history_changes_keep_refuses_an_ambiguous_cut(tok):
    """A moved tools block that spells the terminator leaves two candidates: an error, not a guess."""
    tools = [{"type": "function", "function": {"name": "odd</s>name", "parameters": {"type": "object"}}}]
    llm, messages, _ = await _two_user_turns(tok, None, tools=tools)
    with pytest.raises(EpisodeInputError, match="cannot be placed exactly .*history_changes='restart'"):
        await llm.chat(messages, tools, session_id="ep")


# -- options and presets -------------------------------------------------------------------------


def test_presets_are_typed_and_unknown_names_are_refused(tok):
    assert {"gpt-oss", "glm4.5", "llama3.1-ipython", "mistral-v3", "deepseek-v3", "gemma3", "phi4"} <= set(
        available_families()
    )
    with pytest.raises(UsageError, match="unknown chat-template family 'llama4'; choose one of"):
        TokenLLM(ScriptedTokenEngine([]), tok, chat_template=PHI4, family="llama4")
    with pytest.raises(UsageError, match="'<not_a_token>' is not a single token"):
        TokenLLM(ScriptedTokenEngine([]), tok, chat_template=PHI4, template_options={"terminators": ["<not_a_token>"]})
    opts = family_options("gpt-oss").merged({"tool_role": "user"})
    assert opts.terminators == ["<|call|>", "<|return|>"] and opts.tool_role == "user"
    assert TemplateOptions().merged(None) == TemplateOptions()


def job_with_model(tmp_path, model: dict):
    from aworld_core.worker import load_job

    return load_job({
        "name": "families", "backend": "trl", "output_dir": str(tmp_path / "run"),
        "model": {"path": str(tmp_path / "model"), **model},
        "agent": {"name": "a"},
        "train_dataset": {"name": "arith", "options": {"n": 2}},
        "reward": {"name": "exact_answer"},
    })


def test_the_job_model_section_chooses_the_family(tok, tmp_path):
    from aworld_core.errors import ConfigError
    from aworld_core.worker import build_token_llm

    job = job_with_model(tmp_path, {"family": "gpt-oss", "template_options": {"tool_role": "user"}})
    assert job.model.tool_parser == "gpt_oss"  # the family's parser unless one is given
    llm = build_token_llm(ScriptedTokenEngine([]), tok, job, chat_template=HARMONY)
    assert llm.options.family == "gpt-oss" and llm.options.tool_role == "user"
    assert {tok.convert_ids_to_tokens(i) for i in llm.renderer.stop_ids} == {"<|call|>", "<|return|>"}
    assert job_with_model(tmp_path, {}).model.tool_parser == "hermes"
    with pytest.raises(ConfigError, match="unknown chat-template family 'gpt-4'"):
        job_with_model(tmp_path, {"family": "gpt-4"})
    with pytest.raises(ConfigError, match="template_options.tool_role"):
        job_with_model(tmp_path, {"template_options": {"tool_role": "function"}})


# -- review fixes: short contents, history_changes on earlier re-renders, unparsed calls --------------


@pytest.mark.parametrize("result", ["a", "im", "assistant", "2", "<|im_start|>assistant<|im_sep|>"])
async def test_phi4_dropping_a_short_tool_result_is_refused(tok, result):
    """Old code: a content found in the template's own text ("a" in "assistant") passed the check."""
    call = enc(tok, '<tool_call>\n{"name": "calc", "arguments": {"q": "1+1"}}\n</tool_call><|im_end|>')
    llm = TokenLLM(ScriptedTokenEngine([call]), tok, chat_template=PHI4, family="phi4")
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    messages = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": result}]
    with pytest.raises(EpisodeInputError, match="leaves out the content of a new 'tool' message"):
        await llm.chat(messages, TOOLS, session_id="ep")


async def test_short_tool_results_that_are_rendered_pass(tok):
    call = enc(tok, '<tool_call>\n{"name": "calc", "arguments": {"q": "1+1"}}\n</tool_call><|im_end|>')
    llm = TokenLLM(ScriptedTokenEngine([call, enc(tok, "2<|im_end|>")]), tok, chat_template=PHI4, family="phi4",
                   template_options={"tool_role": "user"})
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    messages = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "a"}]
    await llm.chat(messages, TOOLS, session_id="ep")
    (env,) = env_runs(llm.finish_session("ep"))
    assert tok.decode(env) == "<|im_start|>user<|im_sep|>a<|im_end|><|im_start|>assistant<|im_sep|>"


async def _hermes2pro_follow_up(mode: str | None):
    """Hermes-2-Pro renders '</tool_response><|im_end|>' when last and '</tool_response>\\n<|im_end|>'
    when followed: the re-render shows between the last prompt and the history, not after it."""
    from aworld_core.testing.templates import family_template, family_tokenizer

    tok = family_tokenizer("hermes2pro")
    template = family_template("hermes2pro")
    call = enc(tok, '<tool_call>\n{"name": "calc", "arguments": {"q": "1+1"}}\n</tool_call><|im_end|>')
    engine = ScriptedTokenEngine([call, enc(tok, "It is 2.<|im_end|>"), enc(tok, "Bye.<|im_end|>")])
    options = {"history_changes": mode} if mode else None
    llm = TokenLLM(engine, tok, chat_template=template, family="hermes-2-pro", template_options=options)
    messages = list(QUESTION)
    r1 = await llm.chat(messages, TOOLS, session_id="ep")
    messages += [r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "2"}]
    r2 = await llm.chat(messages, TOOLS, session_id="ep")
    messages += [r2.message(), {"role": "user", "content": "thanks"}]
    return tok, template, llm, messages


async def test_history_changes_error_applies_to_an_earlier_re_rendered_turn():
    """Old code: 'error' was consulted only when the re-render showed after the history, so this one
    was kept silently."""
    _, _, llm, messages = await _hermes2pro_follow_up("error")
    with pytest.raises(EpisodeInputError, match="not prefix-stable"):
        await llm.chat(messages, TOOLS, session_id="ep")


async def test_history_changes_restart_applies_to_an_earlier_re_rendered_turn():
    tok, template, llm, messages = await _hermes2pro_follow_up("restart")
    await llm.chat(messages, TOOLS, session_id="ep")
    fresh = tok.apply_chat_template(messages, tools=TOOLS, chat_template=template, add_generation_prompt=True,
                                    tokenize=False)
    assert llm.engine.calls[2].prompt_ids == enc(tok, fresh)
    assert llm.finish_session("ep").history_rewritten


async def test_history_changes_keep_is_unchanged_for_an_earlier_re_rendered_turn():
    _, _, llm, messages = await _hermes2pro_follow_up(None)
    await llm.chat(messages, TOOLS, session_id="ep")
    assert llm.session("ep").template_rewrites == 1
    view = llm.finish_session("ep")
    assert not view.history_rewritten and view.num_turns == 3


async def test_gpt_oss_error_result_is_headed_with_the_unparsed_call():
    """The runtime answers every call, an unparsed one with an error: the history message keeps that
    call, so gpt-oss's template heads the error with its name (old code: the message had no call, and
    the template refused the result or headed it with an earlier call's name)."""
    from aworld_core.testing.templates import family_template, family_tokenizer

    tok = family_tokenizer("gpt_oss")
    good = enc(tok, '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"q": "P"}<|call|>')
    bad = enc(tok, '<|channel|>commentary to=functions.calc <|constrain|>json<|message|>{"q": oops<|call|>')
    final = enc(tok, "<|channel|>final<|message|>done<|return|>")
    llm = TokenLLM(ScriptedTokenEngine([good, bad, final]), tok, chat_template=family_template("gpt_oss"),
                   family="gpt-oss")
    messages = list(QUESTION)
    r1 = await llm.chat(messages, TOOLS, session_id="ep")
    messages += [r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "sunny"}]
    r2 = await llm.chat(messages, TOOLS, session_id="ep")
    (call,) = r2.tool_calls
    assert call.error and call.name == "calc"
    messages += [r2.message(), {"role": "tool", "tool_call_id": call.id, "content": "Error: bad JSON"}]
    r3 = await llm.chat(messages, TOOLS, session_id="ep")
    assert r3.content == "done"
    envs = [tok.decode(run) for run in env_runs(llm.finish_session("ep"))]
    assert envs[0].startswith("<|start|>functions.get_weather to=assistant")
    assert envs[1].startswith("<|start|>functions.calc to=assistant") and "Error: bad JSON" in envs[1]
