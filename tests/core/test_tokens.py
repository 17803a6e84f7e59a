"""TokenLLM: token accumulation, the template traps, length limits and history rewrites.

A ``ScriptedTokenEngine`` (a real TokenEngine returning planned ids) drives a real tokenizer
trained here and real chat templates of three families.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from aworld_core.errors import LLMError, UsageError
from aworld_core.llm.base import LLMClient
from aworld_core.schemas import SamplingParams
from aworld_core.testing import assistant_turn_text, load_template
from aworld_core.tokens import LENGTH, STOP, ScriptedTokenEngine, TokenLLM, TokenOutput
from aworld_core.tokens.chat_template import ChatRenderer

pytest_plugins = ["aworld_core.testing.fixtures"]  # the tiny model fixtures

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calc",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
        },
    }
]
QUESTION = [{"role": "user", "content": "What is 2 + 3?"}]


def encode(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def make_llm(tok, family: str, script, **kwargs) -> tuple[TokenLLM, ScriptedTokenEngine]:
    engine = ScriptedTokenEngine(script)
    return TokenLLM(engine, tok, chat_template=load_template(family), **kwargs), engine


def turn_ids(tok, family: str, message: dict, tools=TOOLS) -> list[int]:
    return encode(tok, assistant_turn_text(tok, load_template(family), message, tools))


def call_message(expr: str, content: str = "") -> dict:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": "x", "type": "function", "function": {"name": "calc", "arguments": {"expr": expr}}}],
    }


def full_ids(view) -> list[int]:
    return [*view.prompt_ids, *view.response_ids]


def test_token_llm_is_an_llm_client(tiny_tokenizer):
    llm, _ = make_llm(tiny_tokenizer, "qwen2_5", [])
    assert isinstance(llm, LLMClient)


@pytest.mark.parametrize(
    ("family", "eot"), [("qwen2_5", "<|im_end|>"), ("qwen3", "<|im_end|>"), ("llama3", "<|eot_id|>")]
)
def test_end_of_turn_is_read_off_the_template(tiny_tokenizer, family, eot):
    renderer = ChatRenderer(tiny_tokenizer, load_template(family))
    assert renderer.eot_text == eot
    assert renderer.eot_id == tiny_tokenizer.convert_tokens_to_ids(eot)


async def test_qwen_newline_after_im_end_is_an_env_token(tiny_tokenizer):
    """The template writes "\\n" after <|im_end|>; the model stops at <|im_end|>, so "\\n" is env."""
    tok = tiny_tokenizer
    first = turn_ids(tok, "qwen2_5", call_message("2+3", "Let me compute."))
    second = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "The answer is 5."})
    llm, engine = make_llm(tok, "qwen2_5", [first, second])
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    assert r1.finish_reason == "tool_calls" and r1.content == "Let me compute."
    assert [(c.name, json.loads(c.arguments)) for c in r1.tool_calls] == [("calc", {"expr": "2+3"})]
    messages = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "5"}]
    r2 = await llm.chat(messages, TOOLS, session_id="ep")
    assert r2.content == "The answer is 5." and r2.finish_reason == "stop"
    view = llm.finish_session("ep")

    # the response is exactly: sampled turn 1, env delta, sampled turn 2
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    n1 = len(first)
    assert view.response_ids[:n1] == first and first[-1] == eot
    newline = encode(tok, "\n")
    assert view.response_ids[n1 : n1 + len(newline)] == newline
    assert view.response_mask[n1 : n1 + len(newline)] == [0] * len(newline)
    assert view.response_ids[-len(second) :] == second
    assert view.response_mask == [1] * n1 + [0] * (len(view.response_ids) - n1 - len(second)) + [1] * len(second)
    # and the whole sequence is what the template renders for the conversation, id for id
    rendered = tok.apply_chat_template(
        [*messages, r2.message()], tools=TOOLS, chat_template=load_template("qwen2_5"), tokenize=False
    )
    assert rendered == tok.decode(full_ids(view)) + "\n"
    assert encode(tok, rendered)[:-len(newline)] == full_ids(view)
    # each call's prompt is a prefix of the final sequence
    for call in engine.calls:
        assert full_ids(view)[: len(call.prompt_ids)] == call.prompt_ids
    assert view.num_turns == 2 and not view.truncated and not view.history_rewritten


async def test_default_system_block_appears_once_and_never_in_the_response(tiny_tokenizer):
    tok = tiny_tokenizer
    script = [turn_ids(tok, "qwen2_5", call_message("1+1")), turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "2"})]
    llm, _ = make_llm(tok, "qwen2_5", script)
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    tool = {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "2"}
    await llm.chat([*QUESTION, r1.message(), tool], TOOLS, session_id="ep")
    view = llm.finish_session("ep")
    default = "You are a tiny test assistant."
    assert tok.decode(view.prompt_ids).count(default) == 1
    assert default not in tok.decode(view.response_ids)
    assert tok.decode(view.response_ids).count("<|im_start|>system") == 0


async def test_llama3_turns_have_no_separator_and_end_with_eot(tiny_tokenizer):
    tok = tiny_tokenizer
    first = turn_ids(tok, "llama3", call_message("6*7"))
    second = turn_ids(tok, "llama3", {"role": "assistant", "content": "42"})
    llm, _ = make_llm(tok, "llama3", [first, second], tool_parser="llama3_json")
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    assert r1.tool_calls[0].name == "calc" and json.loads(r1.tool_calls[0].arguments) == {"expr": "6*7"}
    messages = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "42"}]
    r2 = await llm.chat(messages, TOOLS, session_id="ep")
    view = llm.finish_session("ep")
    rendered = tok.apply_chat_template(
        [*messages, r2.message()], tools=TOOLS, chat_template=load_template("llama3"), tokenize=False
    )
    assert tok.decode(full_ids(view)) == rendered
    delta = view.response_ids[len(first) : len(view.response_ids) - len(second)]
    assert tok.decode(delta).startswith("<|start_header_id|>ipython")  # the sampled <|eot_id|> is not repeated


async def test_qwen3_keeps_the_sampled_think_blocks_the_template_would_strip(tiny_tokenizer):
    tok = tiny_tokenizer
    template = load_template("qwen3")
    think1 = {"role": "assistant", "content": "I will add.", "reasoning_content": "two plus three"}
    first = turn_ids(tok, "qwen3", {**call_message("2+3", "I will add."), "reasoning_content": "two plus three"})
    second = turn_ids(tok, "qwen3", {**think1, "content": "5", "reasoning_content": "the tool said five"})
    third = turn_ids(tok, "qwen3", {"role": "assistant", "content": "8", "reasoning_content": "add three"})
    llm, engine = make_llm(tok, "qwen3", [first, second, third])
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    assert r1.reasoning == "two plus three" and r1.content == "I will add."
    msgs = [*QUESTION, r1.message(), {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "5"}]
    r2 = await llm.chat(msgs, TOOLS, session_id="ep")
    msgs = [*msgs, r2.message(), {"role": "user", "content": "Now add 3."}]
    await llm.chat(msgs, TOOLS, session_id="ep")
    view = llm.finish_session("ep")
    text = tok.decode(full_ids(view))
    # the policy saw (and is trained on) its earlier reasoning...
    assert "two plus three" in text and "the tool said five" in text
    # ...which a fresh render of the same conversation strips (the Qwen3 template drops it)
    fresh = tok.apply_chat_template(msgs, tools=TOOLS, chat_template=template, add_generation_prompt=True, tokenize=False)
    assert "two plus three" not in fresh
    # the third prompt was the accumulated sequence, not that fresh render
    assert engine.calls[2].prompt_ids == full_ids(view)[: len(engine.calls[2].prompt_ids)]
    assert tok.decode(engine.calls[2].prompt_ids) != fresh


async def test_a_length_stop_is_closed_with_an_env_end_of_turn(tiny_tokenizer):
    tok = tiny_tokenizer
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    long = encode(tok, "this answer goes on and on and never stops")
    after = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "ok"})
    llm, _ = make_llm(tok, "qwen2_5", [long, after])
    r1 = await llm.chat(QUESTION, session_id="ep", sampling=SamplingParams(max_tokens=5))
    assert r1.finish_reason == "length" and r1.token_data.response_ids == long[:5]
    assert r1.token_data.stop_reason == LENGTH
    msgs = [*QUESTION, r1.message(), {"role": "user", "content": "go on"}]
    r2 = await llm.chat(msgs, session_id="ep")
    assert r2.finish_reason == "stop"
    view = llm.finish_session("ep")
    assert view.response_ids[:5] == long[:5] and view.response_mask[:5] == [1] * 5
    assert view.response_ids[5] == eot and view.response_mask[5] == 0  # closed by the env
    assert not view.truncated  # a per-call max_tokens is not the episode's budget


async def test_an_empty_completion(tiny_tokenizer):
    tok = tiny_tokenizer
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    llm, _ = make_llm(tok, "qwen2_5", [[eot], [eot]])
    r1 = await llm.chat(QUESTION, session_id="ep")
    assert r1.content == "" and r1.tool_calls == [] and r1.finish_reason == "stop"
    r2 = await llm.chat([*QUESTION, r1.message(), {"role": "user", "content": "hello?"}], session_id="ep")
    assert r2.content == ""
    view = llm.finish_session("ep")
    assert view.response_ids[0] == eot and view.response_mask[0] == 1
    assert view.response_ids.count(eot) == 3  # two sampled, one closing the user turn (env)
    assert [i for i, m in zip(view.response_ids, view.response_mask, strict=True) if m] == [eot, eot]


async def test_response_budget_truncates_ids_mask_and_logprobs_together(tiny_tokenizer):
    tok = tiny_tokenizer
    ids = encode(tok, "a fairly long answer that will not fit in the budget at all")
    planned = TokenOutput(ids, [-0.1 * (i + 1) for i in range(len(ids))], STOP, list(range(len(ids))))
    llm, engine = make_llm(tok, "qwen2_5", [planned], max_response_tokens=7)
    r = await llm.chat(QUESTION, session_id="ep")
    assert r.finish_reason == "length"
    assert engine.calls[0].sampling.max_tokens == 7  # the engine was told the budget
    view = llm.training_view("ep")
    assert view.truncated
    assert len(view.response_ids) == len(view.response_mask) == len(view.response_logprobs) == 7
    assert view.response_ids == ids[:7] and view.response_logprobs == planned.logprobs[:7]
    assert view.response_versions == list(range(7))
    # later calls answer "length" at once, without sampling
    again = await llm.chat([*QUESTION, r.message(), {"role": "user", "content": "more"}], session_id="ep")
    assert again.finish_reason == "length" and again.token_data is None
    assert len(engine.calls) == 1
    assert llm.finish_session("ep") == view


async def test_budget_spent_by_a_long_tool_result(tiny_tokenizer):
    tok = tiny_tokenizer
    first = turn_ids(tok, "qwen2_5", call_message("1+1"))
    llm, engine = make_llm(tok, "qwen2_5", [first], max_response_tokens=len(first) + 10)
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    tool = {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "word " * 200}
    r2 = await llm.chat([*QUESTION, r1.message(), tool], TOOLS, session_id="ep")
    assert r2.finish_reason == "length" and len(engine.calls) == 1
    view = llm.finish_session("ep")
    assert view.truncated and len(view.response_ids) == len(first) + 10
    assert view.response_mask == [1] * len(first) + [0] * 10
    assert view.response_logprobs[len(first) :] == [0.0] * 10 and view.response_versions[len(first) :] == [-1] * 10


async def test_history_rewrite_is_marked_and_the_view_keeps_only_exact_tokens(tiny_tokenizer):
    tok = tiny_tokenizer
    a = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "first answer"})
    b = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "second answer"})
    c = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "third answer"})
    llm, engine = make_llm(tok, "qwen2_5", [a, b, c])
    r1 = await llm.chat(QUESTION, session_id="ep")
    before = llm.training_view("ep")
    # the client summarizes its history instead of echoing it
    rewritten = [{"role": "user", "content": "Summary: asked 2+3. Continue."}]
    r2 = await llm.chat(rewritten, session_id="ep")
    assert r2.content == "second answer"
    # the engine got a fresh prompt for the rewritten conversation, not the old tokens
    fresh = tok.apply_chat_template(
        rewritten, chat_template=load_template("qwen2_5"), add_generation_prompt=True, tokenize=False
    )
    assert engine.calls[1].prompt_ids == encode(tok, fresh)
    # and continuing the rewritten conversation works
    r3 = await llm.chat([*rewritten, r2.message(), {"role": "user", "content": "and?"}], session_id="ep")
    assert r3.content == "third answer"
    view = llm.finish_session("ep")
    assert view.history_rewritten
    assert view.prompt_ids == before.prompt_ids and view.response_ids == before.response_ids == a
    assert r1.content == "first answer"


async def test_echo_may_differ_in_form_but_not_in_meaning(tiny_tokenizer):
    """Clients echo content None for "", re-serialize arguments, drop reasoning and ids."""
    tok = tiny_tokenizer
    first = turn_ids(tok, "qwen2_5", call_message("2+3"))
    llm, _ = make_llm(tok, "qwen2_5", [first, turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "5"})])
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    call = r1.tool_calls[0]
    echo = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "other-id", "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(json.loads(call.arguments), separators=(",", ":"))}}
        ],
    }
    await llm.chat([*QUESTION, echo, {"role": "tool", "tool_call_id": "other-id", "content": "5"}], TOOLS, session_id="ep")
    assert not llm.finish_session("ep").history_rewritten


async def test_a_retried_request_gets_the_same_answer_without_sampling_again(tiny_tokenizer):
    tok = tiny_tokenizer
    llm, engine = make_llm(tok, "qwen2_5", [turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "once"})])
    r1 = await llm.chat(QUESTION, session_id="ep")
    r2 = await llm.chat(QUESTION, session_id="ep")
    assert r2 is r1 and len(engine.calls) == 1
    assert llm.finish_session("ep").num_turns == 1


async def test_malformed_tool_call_is_kept_as_an_error_and_the_turn_goes_on(tiny_tokenizer):
    tok = tiny_tokenizer
    bad = encode(tok, '<tool_call>\n{"name": "calc", "arguments": {"expr": 2+}\n</tool_call><|im_end|>')
    good = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "sorry"})
    llm, _ = make_llm(tok, "qwen2_5", [bad, good])
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    assert len(r1.tool_calls) == 1
    call = r1.tool_calls[0]
    assert call.error and "not valid JSON" in call.error and call.name == "calc"
    assert r1.finish_reason == "stop"
    # the history message keeps the call (arguments "{}": what was written is not JSON), so the
    # runtime's error result answers a call of the message
    assert r1.message()["tool_calls"] == [
        {"id": call.id, "type": "function", "function": {"name": "calc", "arguments": "{}"}}
    ]
    error_msg = {"role": "tool", "tool_call_id": call.id, "content": f"Error: {call.error}"}
    r2 = await llm.chat([*QUESTION, r1.message(), error_msg], TOOLS, session_id="ep")
    assert r2.content == "sorry"
    view = llm.finish_session("ep")
    assert view.response_ids[: len(bad)] == bad and not view.history_rewritten


async def test_an_echo_without_the_unparsed_call_still_extends_the_session(tiny_tokenizer):
    """OpenAI clients (the gateway's) cannot echo a call that failed to parse: the session goes on."""
    tok = tiny_tokenizer
    bad = encode(tok, '<tool_call>\n{"name": "calc", "arguments": {"expr": 2+}\n</tool_call><|im_end|>')
    llm, _ = make_llm(tok, "qwen2_5", [bad, turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "sorry"})])
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    echo = {"role": "assistant", "content": r1.content}
    error_msg = {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "Error: bad JSON"}
    await llm.chat([*QUESTION, echo, error_msg], TOOLS, session_id="ep")
    assert not llm.finish_session("ep").history_rewritten


async def test_a_call_after_finish_session_is_refused(tiny_tokenizer):
    """Old code: a late call started a new session that nobody would ever finish."""
    tok = tiny_tokenizer
    once = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "once"})
    llm, engine = make_llm(tok, "qwen2_5", [once, once])
    await llm.chat(QUESTION, session_id="ep")
    assert llm.finish_session("ep") is not None
    with pytest.raises(LLMError, match="session 'ep' was finished"):
        await llm.chat(QUESTION, session_id="ep")
    assert llm.session_ids() == [] and len(engine.calls) == 1
    await llm.chat(QUESTION, session_id="ep-2")  # other sessions are unaffected


async def test_finished_ids_are_forgotten_after_their_ttl_and_bounded(tiny_tokenizer):
    tok = tiny_tokenizer
    once = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "once"})
    llm, _ = make_llm(tok, "qwen2_5", [once])
    llm.max_finished = 2
    for name in ("a", "b", "c"):
        llm.finish_session(name)
    assert list(llm._finished) == ["b", "c"]
    llm.finished_ttl_s = 0.0
    time.sleep(0.01)
    await llm.chat(QUESTION, session_id="b")  # expired: a new session is allowed again
    assert list(llm._finished) == []


async def test_a_think_close_inside_tool_arguments_keeps_the_call(tiny_tokenizer):
    """Old code: the text was split at the first </think> anywhere, so a call whose arguments
    held one became "reasoning" and the call vanished."""
    tok = tiny_tokenizer
    text = 'Checking.\n<tool_call>\n{"name": "calc", "arguments": {"expr": "strip </think> tags"}}\n</tool_call><|im_end|>'
    for template, preset in (("qwen2_5", "qwen2.5"), ("qwen3", "qwen3")):  # qwen3's prompt may open <think>
        llm = TokenLLM(ScriptedTokenEngine([encode(tok, text)]), tok, chat_template=load_template(template),
                       family=preset)
        r = await llm.chat(QUESTION, TOOLS, session_id="ep")
        assert r.finish_reason == "tool_calls" and r.reasoning is None and r.content == "Checking.", preset
        assert json.loads(r.tool_calls[0].arguments) == {"expr": "strip </think> tags"}


async def test_tool_call_ids_are_deterministic_per_session_and_turn(tiny_tokenizer):
    tok = tiny_tokenizer
    two = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "calc", "arguments": {"expr": "1"}}},
            {"id": "b", "type": "function", "function": {"name": "calc", "arguments": {"expr": "2"}}},
        ],
    }

    async def ids_for(session: str) -> list[str]:
        llm, _ = make_llm(tok, "qwen2_5", [turn_ids(tok, "qwen2_5", two)])
        r = await llm.chat(QUESTION, TOOLS, session_id=session)
        return [c.id for c in r.tool_calls]

    first, again, other = await ids_for("ep-1"), await ids_for("ep-1"), await ids_for("ep-2")
    assert first == again and len(set(first)) == 2 and set(first).isdisjoint(other)


async def test_engine_failure_raises_llm_error_and_leaves_the_session_unchanged(tiny_tokenizer):
    tok = tiny_tokenizer
    answers = [turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "one"}), None,
               turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "two"})]

    def script(prompt_ids, sampling, request_id):
        planned = answers.pop(0)
        if planned is None:
            raise RuntimeError("server went away")
        return planned

    llm, _ = make_llm(tok, "qwen2_5", script)
    r1 = await llm.chat(QUESTION, session_id="ep")
    before = llm.training_view("ep")
    msgs = [*QUESTION, r1.message(), {"role": "user", "content": "next"}]
    with pytest.raises(LLMError, match="server went away"):
        await llm.chat(msgs, session_id="ep")
    assert llm.training_view("ep") == before
    r2 = await llm.chat(msgs, session_id="ep")
    assert r2.content == "two"


async def test_engines_must_return_logprobs_unless_told_otherwise(tiny_tokenizer):
    tok = tiny_tokenizer
    ids = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "x"})
    llm, _ = make_llm(tok, "qwen2_5", [TokenOutput(ids, None, STOP)])
    with pytest.raises(LLMError, match="no logprobs"):
        await llm.chat(QUESTION, session_id="ep")
    llm, _ = make_llm(tok, "qwen2_5", [TokenOutput(ids, None, STOP)], require_logprobs=False)
    await llm.chat(QUESTION, session_id="ep")
    assert set(llm.finish_session("ep").response_logprobs) == {0.0}


async def test_misaligned_engine_output_is_an_error(tiny_tokenizer):
    tok = tiny_tokenizer
    llm, _ = make_llm(tok, "qwen2_5", [TokenOutput([5, 6, 7], [-1.0], STOP)])
    with pytest.raises(LLMError, match="3 token ids but 1 logprobs"):
        await llm.chat(QUESTION, session_id="ep")
    llm, _ = make_llm(tok, "qwen2_5", [TokenOutput([5, 6], [-1.0, -1.0], STOP, [1])])
    with pytest.raises(LLMError, match="versions"):
        await llm.chat(QUESTION, session_id="ep")


async def test_per_token_versions_travel_with_tokens(tiny_tokenizer):
    tok = tiny_tokenizer
    ids = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "hello world"})
    versions = [3] * (len(ids) - 2) + [4, 4]  # weights updated mid-generation (AReaL)
    llm, _ = make_llm(tok, "qwen2_5", [TokenOutput(ids, [-0.2] * len(ids), STOP, versions)])
    r = await llm.chat(QUESTION, session_id="ep")
    assert r.token_data.versions == versions
    assert llm.finish_session("ep").response_versions == versions


async def test_concurrent_calls_in_one_session_are_refused(tiny_tokenizer):
    tok = tiny_tokenizer
    ids = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "slow"})
    engine = ScriptedTokenEngine([ids, ids], delay_s=0.05)
    llm = TokenLLM(engine, tok, chat_template=load_template("qwen2_5"))
    results = await asyncio.gather(
        llm.chat(QUESTION, session_id="ep"), llm.chat(QUESTION, session_id="ep"), return_exceptions=True
    )
    errors = [r for r in results if isinstance(r, LLMError)]
    assert len(errors) == 1 and "in flight" in str(errors[0])


async def test_stateless_calls_return_token_data_and_keep_no_session(tiny_tokenizer):
    tok = tiny_tokenizer
    ids = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "hi"})
    llm, engine = make_llm(tok, "qwen2_5", [ids])
    r = await llm.chat(QUESTION)
    assert r.token_data.response_ids == ids and r.token_data.prompt_ids == engine.calls[0].prompt_ids
    assert llm.session_ids() == []


async def test_finish_session_drops_it(tiny_tokenizer):
    tok = tiny_tokenizer
    llm, _ = make_llm(tok, "qwen2_5", [turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "hi"})])
    await llm.chat(QUESTION, session_id="ep")
    assert llm.finish_session("ep") is not None
    assert llm.finish_session("ep") is None and llm.training_view("ep") is None


async def test_finishing_a_session_during_its_call_does_not_resurrect_it(tiny_tokenizer):
    tok = tiny_tokenizer
    ids = turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "late"})
    engine = ScriptedTokenEngine([ids], delay_s=0.05)
    llm = TokenLLM(engine, tok, chat_template=load_template("qwen2_5"))
    call = asyncio.ensure_future(llm.chat(QUESTION, session_id="ep"))
    await asyncio.sleep(0.01)
    assert llm.finish_session("ep") is None
    await call
    assert llm.session_ids() == []


async def test_bad_input_is_refused_with_a_clear_error(tiny_tokenizer):
    tok = tiny_tokenizer
    llm, _ = make_llm(tok, "qwen2_5", [], max_prompt_tokens=5)
    with pytest.raises(UsageError, match="message 0 has role 'robot'"):
        await llm.chat([{"role": "robot", "content": "x"}], session_id="ep")
    with pytest.raises(UsageError, match="text only"):
        await llm.chat([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], session_id="ep")
    with pytest.raises(LLMError, match="over max_prompt_tokens=5"):
        await llm.chat(QUESTION, session_id="ep")
    with pytest.raises(UsageError, match="unknown tool parser 'nope'"):
        TokenLLM(ScriptedTokenEngine([]), tok, chat_template=load_template("qwen2_5"), tool_parser="nope")
    with pytest.raises(UsageError, match="does not exist"):
        TokenLLM(ScriptedTokenEngine([]), tok, chat_template="/no/such/template.jinja")
    with pytest.raises(UsageError, match="TokenEngine"):
        TokenLLM(object(), tok, chat_template=load_template("qwen2_5"))  # type: ignore[arg-type]


async def test_text_content_parts_are_joined(tiny_tokenizer):
    tok = tiny_tokenizer
    llm, engine = make_llm(tok, "qwen2_5", [turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "ok"})])
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2 + 3?"}]}]
    await llm.chat(parts, session_id="ep")
    assert "What is 2 + 3?" in tok.decode(engine.calls[0].prompt_ids)


async def test_the_end_of_turn_id_is_passed_to_the_engine_as_a_stop(tiny_tokenizer):
    tok = tiny_tokenizer
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    text = encode(tok, "short") + [eot] + encode(tok, "never sampled")
    llm, engine = make_llm(tok, "qwen2_5", [text])
    r = await llm.chat(QUESTION, session_id="ep")
    assert eot in engine.calls[0].sampling.extra["stop_token_ids"]
    assert r.token_data.response_ids == encode(tok, "short") + [eot] and r.content == "short"


async def test_control_token_text_inside_sampled_arguments_does_not_move_the_turn_boundary(tiny_tokenizer):
    """The model may spell '<|im_end|>' with ordinary tokens inside a call's arguments."""
    tok = tiny_tokenizer
    spelled = [i for piece in ("<", "|", "im", "_", "end", "|", ">") for i in encode(tok, piece)]
    eot = tok.convert_tokens_to_ids("<|im_end|>")
    sampled = encode(tok, '<tool_call>\n{"name": "calc", "arguments": {"expr": "') + spelled + encode(
        tok, '"}}\n</tool_call>'
    ) + [eot]
    llm, _ = make_llm(tok, "qwen2_5", [sampled, turn_ids(tok, "qwen2_5", {"role": "assistant", "content": "ok"})])
    r1 = await llm.chat(QUESTION, TOOLS, session_id="ep")
    assert json.loads(r1.tool_calls[0].arguments) == {"expr": "<|im_end|>"}
    tool = {"role": "tool", "tool_call_id": r1.tool_calls[0].id, "content": "?"}
    await llm.chat([*QUESTION, r1.message(), tool], TOOLS, session_id="ep")
    view = llm.finish_session("ep")
    delta = view.response_ids[len(sampled) : view.response_mask.index(1, len(sampled))]
    assert tok.decode(delta) == "\n<|im_start|>user\n<tool_response>\n?\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
