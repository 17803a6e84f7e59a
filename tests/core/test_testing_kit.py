"""``aworld_core.testing`` as a plugin author sees it: the installed package only.

Every check runs in a fresh interpreter whose working directory is outside the repository and
whose ``sys.path`` lacks ``tests/``, so nothing from this suite's ``support`` package can leak in.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

KIT_SCRIPT = r'''
import asyncio, importlib.util, sys
from pathlib import Path

assert importlib.util.find_spec("support") is None, "tests/ is on sys.path"
import aworld_core.testing as kit

heavy = [m for m in ("torch", "transformers", "tokenizers", "uvicorn", "mcp", "starlette") if m in sys.modules]
assert heavy == [], f"import aworld_core.testing imported {heavy}"
assert sorted(kit.__all__) == sorted(dir(kit))

from aworld_core.schemas import SamplingParams
from aworld_core.testing import (
    TEMPLATE_NAMES, McpHttpServer, McpServerProcess, ScriptedTokenEngine, assistant_turn_text,
    load_template, load_tiny_model, load_tiny_tokenizer, make_tiny_model, stdio_server_config,
)
from aworld_core.tokens.scripted import ScriptedTokenEngine as CoreScripted
from aworld_core.tools.mcp_client import MCPServerConnection
from aworld_core.tools.mcp_config import MCPServerConfig

assert ScriptedTokenEngine is CoreScripted  # re-exported, not a copy
assert TEMPLATE_NAMES == ("qwen2_5", "qwen3", "llama3")
work = Path.cwd()

# a tiny model with a chosen template family, loaded back and chatting in that template
directory = make_tiny_model(work / "llama3-model", template="llama3")
tok = load_tiny_tokenizer(directory)
assert tok.chat_template == load_template("llama3")
chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]
text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
assert text.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>"), text
assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n"), text
model = load_tiny_model(directory)
import torch
ids = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False)
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits
assert logits.shape == (1, len(ids), len(tok)), logits.shape

# a template given as Jinja text
custom = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
tok2 = load_tiny_tokenizer(make_tiny_model(work / "custom-model", template=custom))
assert tok2.apply_chat_template(chat, tokenize=False) == "[system] Be brief.\n[user] Capital of France?\n"
try:
    make_tiny_model(work / "nope", template="mistral")
except FileNotFoundError as exc:
    assert "'mistral'" in str(exc) and "qwen2_5, qwen3, llama3" in str(exc), exc
else:
    raise AssertionError("an unknown template family was accepted")

# the scripted engine answers the ids a model trained on the template would sample
answer = assistant_turn_text(tok, load_template("llama3"), {"role": "assistant", "content": "Paris."})
engine = ScriptedTokenEngine([tok.encode(answer, add_special_tokens=False)])
out = asyncio.run(engine.generate(ids, SamplingParams(), request_id="r1"))
assert tok.decode(out.token_ids) == "Paris.<|eot_id|>", tok.decode(out.token_ids)
assert engine.calls[0].prompt_ids == ids

async def tool_names(entry):
    conn = MCPServerConnection("kit", MCPServerConfig(**entry), connect_retries=0)
    tools = await conn.start()
    try:
        return sorted(t.name for t in tools)
    finally:
        await conn.aclose()

# the MCP test server: in a thread, as a process (python -m), and over stdio
server = McpHttpServer(tools=["add", "echo"], token="t0ken").start()
assert asyncio.run(tool_names(server.config())) == ["add", "echo"]
server.stop()
try:
    asyncio.run(tool_names(server.config()))
except Exception as exc:
    assert "ConnectError" in str(exc) or "connect" in str(exc).lower(), exc
else:
    raise AssertionError("the stopped server still answered")
with McpServerProcess(tools=["upper"], transport="sse") as process:
    assert asyncio.run(tool_names(process.config())) == ["upper"]
assert process.process.poll() is not None
entry = stdio_server_config(tools=["count", "add"])
assert entry["args"][:2] == ["-m", "aworld_core.testing.mcp_server"], entry
assert asyncio.run(tool_names(entry)) == ["add", "count"]
print("KIT OK")
'''

NO_HF_SCRIPT = r'''
import sys
sys.modules["torch"] = None  # as if the hf extra were not installed
from aworld_core.errors import UsageError
from aworld_core.testing import MissingExtraError, make_tiny_model
try:
    make_tiny_model("never-made")
except MissingExtraError as exc:
    assert isinstance(exc, UsageError) and isinstance(exc, ImportError)
    assert "torch" in str(exc) and "pip install 'aworld-core[hf]'" in str(exc), exc
else:
    raise AssertionError("no error without torch")
import os
assert not os.path.exists("never-made")
print("NO HF OK")
'''

PLUGIN_TEST = '''
pytest_plugins = ["aworld_core.testing.fixtures"]


def test_fixtures(tiny_model_dir, tiny_tokenizer, tiny_model):
    assert (tiny_model_dir / "config.json").exists()
    text = tiny_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert text.endswith("<|im_start|>user\\nhi<|im_end|>\\n")
    assert tiny_model.config.vocab_size == len(tiny_tokenizer)
'''


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def test_kit_from_a_fresh_interpreter_outside_the_repo(tmp_path: Path) -> None:
    done = _run([sys.executable, "-c", KIT_SCRIPT], tmp_path)
    assert done.returncode == 0 and "KIT OK" in done.stdout, done.stdout + done.stderr


def test_missing_hf_extra_names_the_extra(tmp_path: Path) -> None:
    done = _run([sys.executable, "-c", NO_HF_SCRIPT], tmp_path, timeout=60)
    assert done.returncode == 0 and "NO HF OK" in done.stdout, done.stdout + done.stderr


def test_fixtures_load_as_a_pytest_plugin(tmp_path: Path) -> None:
    (tmp_path / "test_uses_kit.py").write_text(textwrap.dedent(PLUGIN_TEST))
    strict = ["-W", "error::pytest.PytestAssertRewriteWarning"]  # the plugin module is rewritten
    done = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *strict, "test_uses_kit.py"], tmp_path)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
