"""aworld-gaia-env's hooks: the ``gaia`` tool environment, dataset and reward."""

from __future__ import annotations

from aworld_core.hookspecs import hookimpl
from aworld_core.specs import DatasetSpec, EnvironmentSpec, RewardSpec

#: the request that frees an episode's workspace and browser context (the server's
#: ``DELETE /workspaces/{episode}`` route), in mcp_config's ``release`` form; a job running this
#: environment exports it as MCP_SERVER_RELEASE, and ``serve`` prints it for a ``.env``
RELEASE = "DELETE {base}/workspaces/{episode_id}"


@hookimpl
def register_environments() -> list[EnvironmentSpec]:
    return [
        EnvironmentSpec(
            "gaia",
            "GAIA tools (documents, code, terminal, web, wiki, arxiv, media) on one MCP endpoint",
            serve_command=("python", "-m", "aworld_gaia_env", "serve"),
            release=RELEASE,
        )
    ]


@hookimpl
def register_datasets() -> list[DatasetSpec]:
    return [DatasetSpec("gaia", "GAIA validation/test questions from a local GAIA directory", "aworld_gaia_env.data:load_gaia")]


@hookimpl
def register_rewards() -> list[RewardSpec]:
    return [
        RewardSpec(
            "gaia",
            "1.0 when the <answer>...</answer> matches the ground truth under GAIA's scorer rules",
            "aworld_gaia_env.reward:gaia_reward",
        )
    ]
