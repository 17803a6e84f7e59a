"""Two ways the token path trained a sequence the chat template never renders (issue 28), on the
kit's published-shape templates:

* Mistral v3 with tools and a system message under ``history_changes='keep'`` (or no family):
  the template moves the tools block and the system text to the last user message, and keeping
  the sequence put them in the trained tokens twice; after a tool turn it stops rendering the
  system text at all. Both are now refused naming the move; the preset (``restart``) is exact.
* Llama 3.1 with ``<|eom_id|>`` sampled where the template renders ``<|eot_id|>``: the sequence
  was not the template's render (the sampled token stood in for, or was followed by, the
  template's). Now a new segment starts from a fresh render, each segment exact; where the
  template renders the sampled ``<|eom_id|>`` (ipython mode, a tool call) nothing changes.
"""

from __future__ import annotations

import pytest

from aworld_core.errors import EpisodeInputError
from aworld_core.testing.templates import FAMILIES, family_template, family_tokenizer, model_turn_text
from aworld_core.tokens import ScriptedTokenEngine, TokenLLM
from aworld_core.tokens.messages import normalize_messages

TOOLS = [{"type": "function", "function": {"name": "search", "description": "The search tool of the test.",
          "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
SYSTEM = {"role": "system", "content": "SYSTEXT: answer briefly."}


def _text(tok, ids) -> str:
    return tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)


def _render(tok, name, messages, **kwargs) -> str:
    return tok.apply_chat_template(messages, tools=TOOLS, chat_template=family_template(name),
                                   add_generation_prompt=True, tokenize=False, **kwargs)


def _mistral(name="mistral_v3", **options):
    tok = family_tokenizer(name)
    fam = FAMILIES[name]
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "abcdefghi", "type": "function", "function": {"name": "search", "arguments": {"q": "x"}}}]}
    turns = {"call": model_turn_text(fam, tok, call, TOOLS),
             "answer": model_turn_text(fam, tok, {"role": "assistant", "content": "Done."}, TOOLS)}
    return tok, turns, options


async def _episode(tok, name, script, follow, **llm_kwargs):
    engine = ScriptedTokenEngine([tok.encode(t, add_special_tokens=False) for t in script])
    llm = TokenLLM(engine, tok, chat_template=family_template(name), **llm_kwargs)
    messages = [SYSTEM, {"role": "user", "content": "What is it?"}]
    for step in follow:
        response = await llm.chat(messages, TOOLS, session_id="s")
        messages.append(response.message())
        if step == "tool":
            messages.append({"role": "tool", "tool_call_id": response.tool_calls[0].id, "content": "res"})
        elif step == "user":
            messages.append({"role": "user", "content": "And more?"})
    return llm, messages


@pytest.mark.parametrize("llm_kwargs", [{"family": "mistral-v3", "template_options": {"history_changes": "keep"}},
                                        {"tool_parser": "mistral"}], ids=["keep", "no-family"])
async def test_mistral_v3_keep_refuses_to_train_the_moved_tools_block_and_system_text_twice(llm_kwargs):
    tok, turns, _ = _mistral()
    with pytest.raises(EpisodeInputError, match=r"moves .* to after the assistant's turn .*train it twice"):
        await _episode(tok, "mistral_v3", [turns["answer"], turns["answer"]], ["user", "end"], **llm_kwargs)


async def test_mistral_v3_keep_refuses_a_system_text_the_template_stops_rendering():
    tok, turns, _ = _mistral()
    with pytest.raises(EpisodeInputError, match=r"no longer renders the earlier 'system' message"):
        await _episode(tok, "mistral_v3", [turns["call"], turns["answer"]], ["tool", "end"],
                       family="mistral-v3", template_options={"history_changes": "keep"})


async def test_mistral_v3_preset_segments_are_each_the_templates_render():
    tok, turns, _ = _mistral()
    llm, messages = await _episode(tok, "mistral_v3", [turns["answer"], turns["answer"]], ["user", "end"],
                                   family="mistral-v3")
    view = llm.finish_session("s")
    first, second = view.segments()
    assert _text(tok, first.prompt_ids + first.response_ids) == _render(tok, "mistral_v3", messages[:2]) + turns["answer"]
    assert _text(tok, second.prompt_ids) == _render(tok, "mistral_v3", messages[:4])
    for segment in (first, second):
        text = _text(tok, segment.prompt_ids + segment.response_ids)
        assert text.count("[AVAILABLE_TOOLS]") == 1 and text.count("SYSTEXT") == 1


LLAMA_CALL = '{"name": "search", "parameters": {"q": "x"}}'


@pytest.mark.parametrize("first", [LLAMA_CALL + "<|eom_id|>", "Hello there.<|eom_id|>"], ids=["call", "answer"])
async def test_llama31_a_sampled_eom_where_the_template_renders_eot_starts_a_fresh_segment(first):
    tok = family_tokenizer("llama31")
    engine = ScriptedTokenEngine([tok.encode(t, add_special_tokens=False) for t in (first, "Done.<|eot_id|>")])
    llm = TokenLLM(engine, tok, chat_template=family_template("llama31"), family="llama3.1")
    messages = [{"role": "user", "content": "What?"}]
    response = await llm.chat(messages, TOOLS, session_id="s")
    messages.append(response.message())
    if response.tool_calls:
        messages.append({"role": "tool", "tool_call_id": response.tool_calls[0].id, "content": "res"})
    else:
        messages.append({"role": "user", "content": "more"})
    await llm.chat(messages, TOOLS, session_id="s")
    view = llm.finish_session("s")
    first_segment, second = view.segments()
    # the first segment ends with the sampled <|eom_id|>: nothing of the template's appended after it
    assert _text(tok, first_segment.response_ids) == first
    assert first_segment.response_mask == [1] * len(first_segment.response_ids)
    # the next segment is the template's own render (its <|eot_id|> after the turn), then the sample
    assert _text(tok, second.prompt_ids) == llm.renderer.render(normalize_messages(messages), TOOLS, generation_prompt=True)
    assert _text(tok, second.response_ids) == "Done.<|eot_id|>"


async def test_llama31_ipython_a_sampled_eom_after_a_call_is_the_templates_and_stays_one_segment():
    tok = family_tokenizer("llama31_ipython")
    kwargs = dict(FAMILIES["llama31_ipython"].template_kwargs)
    engine = ScriptedTokenEngine([tok.encode(t, add_special_tokens=False)
                                  for t in (LLAMA_CALL + "<|eom_id|>", "Done.<|eot_id|>")])
    llm = TokenLLM(engine, tok, chat_template=family_template("llama31"), family="llama3.1-ipython",
                   chat_template_kwargs=kwargs)
    messages = [{"role": "user", "content": "What?"}]
    response = await llm.chat(messages, TOOLS, session_id="s")
    assert len(response.tool_calls) == 1 and not response.tool_calls[0].error
    messages += [response.message(), {"role": "tool", "tool_call_id": response.tool_calls[0].id, "content": "res"}]
    await llm.chat(messages, TOOLS, session_id="s")
    view = llm.finish_session("s")
    assert view.num_segments == 1
    text = _text(tok, view.prompt_ids + view.response_ids)
    assert "<|eom_id|><|eot_id|>" not in text
    assert text == llm.renderer.render(normalize_messages(messages), TOOLS, generation_prompt=True) + "Done.<|eot_id|>"
