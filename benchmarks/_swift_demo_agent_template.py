"""An ms-swift external plugin for the swift row of ``benchmarks/backends_e2e.py``: the agent template
``aworld_demo``, hermes with its tool listing left out.

The demo model's own chat format (``examples/cpu_grpo_demo``'s ``chat_template.jinja``) lists no
tools (the model learned its one tool, ``calc``, in the warm start), and ms-swift's
``template_backend: jinja`` cannot be used to render it (it renders the id-backed assistant
message of every later turn as the text of its id list; aworld-swift refuses it). ms-swift's
``chatml`` template with this agent template renders the demo's first prompt token for token
(``<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n``) and continues it with ids; hermes
itself would add a ~600-token tool block, past the model's 256 positions.
"""

from __future__ import annotations

from typing import Any

from swift.agent_template import agent_template_map
from swift.agent_template.hermes import HermesAgentTemplate

NAME = "aworld_demo"


class DemoAgentTemplate(HermesAgentTemplate):
    """Hermes without the tool listing: the system prompt stays what it is (none for the demo)."""

    def _format_tools(self, tools: list[Any], system: str | None = None, user_message: Any = None) -> str | None:
        return system


agent_template_map[NAME] = DemoAgentTemplate
