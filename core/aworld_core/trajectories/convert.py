"""Kept episodes to the SFT formats users train on.

* **token-exact** (``token_rows``): when an episode carries the token view of the model to train
  (``Episode.training``, recorded by ``TokenLLM``), a row per training segment is ``prompt_ids``,
  ``completion_ids`` (the response as sampled, tool/environment tokens included) and
  ``completion_mask`` (1 exactly on the sampled assistant tokens, 0 on tool output and template
  text), with ``segment`` (its place in the episode) and ``segment_start`` (``first``, ``rewrite``,
  ``template``, ``compaction``). Nothing is re-tokenized, so the model learns exactly the
  sequences that were sampled, each in the context it was sampled in. A tokenizer other than the
  one the episode was sampled with is refused (``check_tokenizer``).
* **messages** (``messages_rows``): the conversation and its tools, for a trainer that renders
  them with the target model's chat template: TRL's ``SFTTrainer`` (``messages`` + ``tools``,
  ``assistant_only_loss``).
* a backend's own rows: a backend registers the formats its SFT trainer reads
  (``Backend.formats``, e.g. ``verl``: multi-turn SFT parquet, ``swift``: ms-swift's agent JSONL),
  each built on ``messages_rows``; :func:`convert` finds them by name, so the core knows none.

Tool calls in messages follow the chat-template convention: ``{"type": "function", "function":
{"name", "arguments": <dict>}}`` (the JSON text the model wrote is parsed; text that is not a JSON
object stays a string). Episodes do not record the tool schemas their agent was given; pass
``tools`` (OpenAI function specs) so the rendered prompt lists them as at collection time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aworld_core.errors import UsageError
from aworld_core.schemas import Episode, Message
from aworld_core.trajectories.filter import stale_rewrite, training_views
from aworld_core.trajectories.read import task_key

FORMATS = ("tokens", "messages")  # the core's own; installed backends add theirs (Backend.formats)


class TokenizerMismatchError(UsageError):
    """Token data sampled with another tokenizer than the one given (its ids would mean other text)."""


# ---------------------------------------------------------------------------------------------
# token-exact
# ---------------------------------------------------------------------------------------------


def _first_user_text(episode: Episode) -> str | None:
    for message in episode.messages:
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    return None


def check_tokenizer(episode: Episode, tokenizer: Any) -> None:
    """Raise ``TokenizerMismatchError`` unless the episode's ids read back as its own text with
    ``tokenizer``: every id in its vocabulary, the first user message inside the decoded prompt,
    each assistant message's text inside the decoded response. Decoding only checks; the trained
    ids are never re-encoded."""
    views = training_views(episode)
    if not views:
        return
    size = len(tokenizer)
    for index, view in enumerate(views):
        top = max([*view["prompt_ids"], *view["response_ids"]], default=-1)
        if top >= size:
            raise TokenizerMismatchError(
                f"episode {episode.id}: token view {index} holds id {top}, outside this tokenizer's vocabulary "
                f"({size} tokens); the episode was sampled with another tokenizer. Convert with the tokenizer of "
                f"the model that sampled it, or use the messages format (re-rendered with this model's template)"
            )
    # the conversation recorded is the last one (after any rewrite or compaction): its texts are in
    # some segment's prompt or response
    prompt_text = "\n".join(tokenizer.decode(v["prompt_ids"], skip_special_tokens=False) for v in views)
    response_text = "\n".join(tokenizer.decode(v["response_ids"], skip_special_tokens=False) for v in views)
    question = _first_user_text(episode)
    expected = [("prompt", question, prompt_text)] if question and question.strip() else []
    expected += [
        ("response", m["content"].strip(), response_text)
        for m in episode.messages
        if m.get("role") == "assistant" and isinstance(m.get("content"), str) and m["content"].strip()
    ]
    for where, text, decoded in expected:
        if text not in decoded:
            raise TokenizerMismatchError(
                f"episode {episode.id}: its {where} ids decoded with this tokenizer do not contain the episode's "
                f"own text {text[:60]!r} (decoded: {decoded[:80]!r}...); the episode was sampled with another "
                f"tokenizer. Convert with the tokenizer of the model that sampled it, or use the messages format"
            )


def token_rows(episodes: Sequence[Episode], tokenizer: Any = None, *, extra_views: bool = True) -> list[dict[str, Any]]:
    """One row per training segment: ``prompt_ids``, ``completion_ids``, ``completion_mask``,
    ``segment``, ``segment_start`` (+ ids).

    ``tokenizer`` (recommended) checks the ids belong to it (``check_tokenizer``). ``extra_views``:
    also the sessions of a Swarm's other trained agents. An episode without token data, or one
    recorded before segments whose client rewrote its history (its later turns have no tokens), is
    refused (filter with ``require_tokens``)."""
    rows: list[dict[str, Any]] = []
    for episode in episodes:
        views = training_views(episode)
        if not views:
            raise UsageError(
                f"episode {episode.id} (task {episode.task_id}) has no token data; the token-exact format needs "
                f"episodes sampled through a TokenLLM. Drop such episodes (FilterSpec(require_tokens=True), "
                f"--require-tokens) or convert to the messages format"
            )
        if stale_rewrite(episode):
            raise UsageError(
                f"episode {episode.id}: its client rewrote the history and it was recorded before training segments "
                f"existed, so its turns after the rewrite have no token data; drop it (FilterSpec(require_tokens=True) "
                f"drops such episodes) or convert to the messages format"
            )
        if tokenizer is not None:
            check_tokenizer(episode, tokenizer)
        primary = episode.training.num_segments if episode.training is not None else 0
        for index, view in enumerate(views if extra_views else views[:primary]):
            n = len(view["response_ids"])
            mask = list(view["response_mask"])
            if len(mask) != n or any(bit not in (0, 1) for bit in mask):
                raise UsageError(f"episode {episode.id}, segment {index}: response_mask must be {n} values of 0/1")
            if not view["prompt_ids"] or not any(mask):
                continue  # nothing sampled: no loss to take
            rows.append({
                "prompt_ids": list(view["prompt_ids"]),
                "completion_ids": list(view["response_ids"]),
                "completion_mask": mask,
                "episode_id": episode.id,
                "task_id": task_key(episode),
                "segment": index,
                "segment_start": view.get("start", "first"),
            })
    return rows


# ---------------------------------------------------------------------------------------------
# messages
# ---------------------------------------------------------------------------------------------


def _arguments(text: Any) -> Any:
    if not isinstance(text, str):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def normalize_message(message: Message) -> Message:
    """A message as chat templates take it (tool-call arguments as a dict; no runtime-only keys)."""
    role = message.get("role")
    out: Message = {"role": role, "content": message.get("content")}
    if role == "assistant" and message.get("tool_calls"):
        calls = []
        for call in message["tool_calls"]:
            function = call.get("function", call)
            calls.append({
                "id": call.get("id"),
                "type": "function",
                "function": {"name": function.get("name"), "arguments": _arguments(function.get("arguments"))},
            })
        out["tool_calls"] = calls
    if role == "tool":
        out["tool_call_id"] = message.get("tool_call_id")
        if message.get("name") is not None:
            out["name"] = message["name"]
    if out["content"] is None and role != "assistant":
        out["content"] = ""
    return out


def _checked_messages(episode: Episode) -> list[Message]:
    messages = [normalize_message(m) for m in episode.messages]
    if not any(m["role"] == "assistant" for m in messages):
        raise UsageError(f"episode {episode.id} (task {episode.task_id}) has no assistant message to train on")
    return messages


def messages_rows(episodes: Sequence[Episode], tools: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """TRL ``SFTTrainer`` conversational rows: ``messages`` (+ ``tools`` when given)."""
    rows = []
    for episode in episodes:
        row: dict[str, Any] = {"messages": _checked_messages(episode)}
        if tools is not None:
            row["tools"] = tools
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------


def read_tools(path: str | Path | None) -> list[dict[str, Any]] | None:
    """OpenAI tool specs from a JSON file (a list, or ``{"tools": [...]}``)."""
    if path is None:
        return None
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"tools file '{path}' could not be read as JSON: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
        raise UsageError(f"tools file '{path}' must hold a JSON list of tool specs ({{'type': 'function', ...}})")
    return data


def write_rows(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """``.jsonl`` (one JSON object per line) or ``.parquet`` (pyarrow infers the columns)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(list(rows)), str(path))
    elif path.suffix.lower() in (".jsonl", ".ndjson"):
        with path.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        raise UsageError(f"cannot write '{path}': use a .jsonl or .parquet file name")
    return path


def write_job_sft_data(
    job: Any, output_dir: str | Path, format: str | Callable[..., list[dict[str, Any]]], files: dict[str, str]
) -> dict[str, str]:
    """A job's ``sft:`` episode files (``train``, ``val``) converted to ``format`` (a format's name,
    or a backend's rows function itself) and written under ``output_dir`` at ``files[name]``;
    returns ``{relative path: written path}``.

    What a backend that plans its own SFT trainer (verl, ms-swift) writes before launching it.
    """
    from aworld_core.trajectories.read import read_trajectories

    tools = read_tools(job.resolve_path(job.sft.tools)) if job.sft.tools else None
    written = {}
    for name, relative in files.items():
        value = getattr(job.sft, name)
        if value is None:
            continue
        episodes = read_trajectories(job.resolve_path(value)).episodes
        if not episodes:
            raise UsageError(f"sft.{name} holds no episodes")
        rows = format(episodes, tools) if callable(format) else convert(episodes, format, tools=tools)
        written[relative] = str(write_rows(rows, Path(output_dir) / relative))
    return written


def backend_formats() -> dict[str, str]:
    """The row formats installed backends register: format name -> the backend's name."""
    from aworld_core.plugins import get_plugin_manager

    found: dict[str, str] = {}
    for name, item in sorted(get_plugin_manager().catalog().items("backend").items()):
        for format in item.spec.formats:
            found.setdefault(format, name)
    return found


def format_names() -> list[str]:
    """Every format :func:`convert` writes here: the core's, then the installed backends'."""
    return [*FORMATS, *(f for f in backend_formats() if f not in FORMATS)]


def convert(episodes: Sequence[Episode], format: str, *, tokenizer: Any = None,
            tools: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Rows of ``format``: one of :data:`FORMATS`, or a format an installed backend registers."""
    if format == "tokens":
        return token_rows(episodes, tokenizer)
    if format == "messages":
        return messages_rows(episodes, tools)
    backend = backend_formats().get(format)
    if backend is None:
        raise UsageError(
            f"unknown format '{format}'; use one of: {', '.join(format_names())} (a backend's own format "
            f"needs its plugin installed)"
        )
    from aworld_core.plugins import get_plugin_manager

    return get_plugin_manager().catalog().backend(backend).rows_writer(format)(episodes, tools)
