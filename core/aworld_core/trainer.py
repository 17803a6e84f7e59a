"""``AgentTrainer``: train an agent from Python with the same flow as the CLI.

    trainer = AgentTrainer(agent=agent, config={"backend": "trl", ...}, reward_func=reward,
                           train_dataset="train.jsonl", test_dataset="test.jsonl")
    trainer.train()

Every input is validated before anything launches. Backends run episodes in other processes
(Ray workers, AReaL rollout workers), so the agent, reward and data travel as **import
references and serialized config**, never as objects or generated code:

* an ``Agent`` whose tools are module-level functions is serialized into the job's ``agent``
  section (every ``AgentConfig`` field, tools as ``module:function``), which replaces the
  config's: a field the config's ``agent`` section also sets must agree (``options`` is kept);
  a ``Swarm`` (or any agent that cannot be serialized) is passed as an importable factory,
  ``agent="my_pkg.agents:make_swarm"``;
* a reward function becomes ``module:function`` (a function defined in the script you run
  becomes ``/path/to/script.py:function``: keep the script's training call under
  ``if __name__ == "__main__":`` so workers can import it);
* in-memory datasets (lists of dicts, ``Sample`` rows, a HuggingFace ``Dataset``) are written
  as JSONL into the job's output directory and referenced by path.
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aworld_core.config import (
    DatasetSection,
    JobConfig,
    absolute_path,
    absolute_ref,
    load_job_config,
    resolve_job_paths,
)
from aworld_core.errors import ConfigError, UsageError
from aworld_core.schemas import Sample


def callable_ref(func: Callable[..., Any], what: str) -> str:
    """The import reference that finds ``func`` again in another process."""
    qualname = getattr(func, "__qualname__", "")
    module = getattr(func, "__module__", None)
    if not module or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise UsageError(
            f"{what} {func!r} cannot reach the backend's worker processes: define it at module level "
            f"(not a lambda or a nested function), or pass an import reference 'module:function'"
        )
    if module == "__main__":
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        if not main_file:
            raise UsageError(
                f"{what} {qualname} is defined in an interactive session; put it in a module and pass "
                f"'module:{qualname}'"
            )
        return f"{Path(main_file).resolve()}:{qualname}"
    return f"{module}:{qualname}"


def agent_section(agent: Any) -> dict[str, Any]:
    """An ``Agent`` as the job config's ``agent`` section: every ``AgentConfig`` field, its name,
    prompt and MCP servers, and its tools as import references."""
    from aworld_core.agents.agent import Agent, AgentConfig

    if isinstance(agent, str):
        return {"factory": agent}
    if not isinstance(agent, Agent):
        raise UsageError(
            f"agent {type(agent).__name__} cannot be serialized to the backend's worker processes; "
            f"pass an importable factory instead: agent='my_package.my_module:make_agent' (a function "
            f"returning the Agent or Swarm)"
        )
    extra = sorted(set(type(agent.conf).model_fields) - set(AgentConfig.model_fields))
    if extra:
        raise UsageError(
            f"agent '{agent.name}' has a {type(agent.conf).__name__} conf with fields {extra} that the job's "
            f"agent section cannot carry; pass an importable factory instead: agent='my_package.my_module:"
            f"make_agent' (a function returning the Agent)"
        )
    return {
        "name": agent.name,
        "desc": agent.desc or "",
        "system_prompt": agent.system_prompt,
        **agent.conf.model_dump(mode="json"),
        "llm_api_key": agent.conf.llm_api_key,  # kept in memory only (dumps exclude it; the launch exports it)
        "mcp_config": (
            agent.mcp_config.model_dump(mode="json", by_alias=True, exclude_none=True) if agent.mcp_config else None
        ),
        "mcp_servers": list(agent.mcp_servers) if agent.mcp_servers else None,
        "tools": [callable_ref(tool.fn, "tool") for tool in agent.tools],
    }


def _dump_keeping_key(job: JobConfig) -> dict[str, Any]:
    """The job's set fields as plain data, with ``agent.llm_api_key`` (which dumps exclude) kept in
    memory, so the launch can hand it to the workers' environment."""
    data = job.model_dump(mode="json", exclude_unset=True)
    if job.agent.llm_api_key:
        data.setdefault("agent", {})["llm_api_key"] = job.agent.llm_api_key
    return data


def _merge_agent_section(section: dict[str, Any], configured: dict[str, Any]) -> dict[str, Any]:
    """``section`` (from ``agent=``) with the config's ``agent.options``; any other field the config
    sets must agree with it, since the config's section is otherwise replaced."""
    given = load_job_config(data={"agent": configured}).agent
    ours = load_job_config(data={"agent": section}).agent  # ConfigError if the Agent's conf was mutated badly

    def shown(name: str, value: Any) -> Any:
        return "***" if name == "llm_api_key" and value else value

    conflicts = [
        (
            f"agent.{name}",
            shown(name, getattr(given, name)),
            f"{shown(name, getattr(ours, name))!r} (as agent= has it) or unset",
        )
        for name in sorted(given.model_fields_set - {"options"})
        if getattr(given, name) != getattr(ours, name)
    ]
    if conflicts:
        lines = "\n".join(f"  {loc}: got {value!r}; expected {expected}" for loc, value, expected in conflicts)
        raise ConfigError(
            "the config's agent section disagrees with agent=, which replaces it: set these on the Agent "
            f"(or its AgentConfig) and remove them from the config:\n{lines}",
            conflicts,
        )
    return {**section, **({"options": configured["options"]} if "options" in configured else {})}


def _dataset_section(data: Any, role: str, output_dir: Path) -> dict[str, Any] | None:
    if data is None:
        return None
    key = f"{role}_dataset"  # paths given in Python are relative to the current directory
    if isinstance(data, (str, Path)):
        return {"path": absolute_path(data, Path.cwd())}
    if isinstance(data, DatasetSection):
        return resolve_job_paths({key: data.model_dump(exclude_none=True)}, Path.cwd())[key]
    if isinstance(data, dict):
        return resolve_job_paths({key: dict(data)}, Path.cwd())[key]
    rows = _rows(data, role)
    target = output_dir / "data" / f"{role}.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return {"path": str(target.resolve())}


def _rows(data: Any, role: str) -> list[dict[str, Any]]:
    if hasattr(data, "to_list") and hasattr(data, "column_names"):  # a HuggingFace Dataset
        return list(data.to_list())
    try:
        rows = list(data)
    except TypeError:
        raise UsageError(
            f"{role}_dataset must be a file path, a dataset section dict, a list of rows, Sample objects "
            f"or a HuggingFace Dataset; got {type(data).__name__}"
        ) from None
    out = []
    for index, row in enumerate(rows):
        if isinstance(row, Sample):
            out.append(row.model_dump(mode="json"))
        elif isinstance(row, dict):
            out.append(row)
        else:
            raise UsageError(f"{role}_dataset row {index} is a {type(row).__name__}; rows must be dicts or Samples")
    return out


def _reward_section(reward: Any) -> dict[str, Any] | None:
    if reward is None:
        return None
    if isinstance(reward, str):  # a 'file.py:name' given in Python is relative to the current directory
        return {"name": absolute_ref(reward, Path.cwd())}
    if isinstance(reward, dict):
        return resolve_job_paths({"reward": dict(reward)}, Path.cwd())["reward"]
    if callable(reward):
        params = inspect.signature(reward).parameters
        return {"name": callable_ref(reward, "reward_func"), "trajectory_aware": "episode" in params}
    raise UsageError(f"reward_func must be a function, a registered reward name or 'module:function'; got {reward!r}")


class AgentTrainer:
    """Validate an agent, its data and reward, then train it on the configured backend."""

    def __init__(
        self,
        agent: Any = None,
        config: JobConfig | dict[str, Any] | str | Path | None = None,
        reward_func: Any = None,
        train_dataset: Any = None,
        test_dataset: Any = None,
        *,
        train_backend: str | None = None,
        run_path: str | Path | None = None,
    ):
        """``train_backend`` and ``run_path`` are upstream AWorld's names (docs/migration.md): the
        backend (as ``backend`` in the config) and the folder runs are written under (the job's
        output directory is ``<run_path>/<name>`` unless the config sets ``output_dir``)."""
        base = self._base_config(config)
        if train_backend is not None:
            if base.get("backend") not in (None, train_backend):
                raise UsageError(
                    f"train_backend={train_backend!r} disagrees with the config's backend {base['backend']!r}; "
                    f"give one of them"
                )
            base["backend"] = train_backend
        if run_path is not None and not base.get("output_dir"):
            base["output_dir"] = absolute_path(Path(run_path) / str(base.get("name") or "aworld-job"), Path.cwd())
        output_dir = Path(load_job_config(data=base).resolved_output_dir())  # ConfigError naming bad fields
        if agent is not None:
            base["agent"] = _merge_agent_section(agent_section(agent), base.get("agent") or {})
        for role, data in (("train", train_dataset), ("test", test_dataset)):
            section = _dataset_section(data, role, output_dir)
            if section is not None:
                base[f"{role}_dataset"] = section
        reward = _reward_section(reward_func)
        if reward is not None:
            base["reward"] = reward
        self.job = load_job_config(data=base)
        self._validate()

    @staticmethod
    def _base_config(config: Any) -> dict[str, Any]:
        if config is None:
            return {}
        if isinstance(config, (str, Path)):
            job = load_job_config(config)
            return _dump_keeping_key(job) | {"base_dir": str(Path(config).resolve().parent)}
        if isinstance(config, JobConfig):
            return _dump_keeping_key(config)
        if type(config).__module__.startswith("omegaconf"):  # an upstream verl config (DictConfig)
            from omegaconf import OmegaConf

            config = OmegaConf.to_container(config, resolve=True)
        if isinstance(config, dict):
            return json.loads(json.dumps(config, default=str))
        raise UsageError(f"config must be a dict, a JobConfig or a config file path; got {type(config).__name__}")

    def _validate(self) -> None:
        """Fail before launch: the backend, the agent, the datasets and the reward must all resolve."""
        from aworld_core.datasets import load_dataset_section
        from aworld_core.jobs import choose_backend
        from aworld_core.plugins import get_plugin_manager
        from aworld_core.settings import get_settings
        from aworld_core.validation import JobProblems, validate_job

        self.backend = choose_backend(None, self.job)
        self.job = self.job.model_copy(update={"backend": self.backend})
        problems = JobProblems()  # every problem reported at once, these with the CLI's checks
        with problems.check("agent"):
            if self.job.agent.openai_agent:  # the kit's agent (build_agent), not an Agent the hook builds
                from aworld_core.worker.openai_agent import OpenAIAgent

                OpenAIAgent.from_job(self.job)  # imports the function: a wrong reference fails here
            elif get_plugin_manager().hook.build_agents(job=self.job, settings=get_settings()) is None:
                raise UsageError("no agent: pass agent=... or set 'agent' (fields or factory) in the config")
        if self.job.train_dataset is None and self.job.sft is None:
            problems.add("train_dataset", UsageError(
                "no training data: pass train_dataset=... or set 'train_dataset' in the config"))
        if self.job.reward is None and self.job.sft is None:
            problems.add("reward", UsageError("no reward: pass reward_func=... or set 'reward' in the config"))
        validate_job(None, self.job, problems=problems)  # the CLI's checks; plan() and train() add the backend's
        self.train_samples = (
            load_dataset_section(self.job.train_dataset, self.job.base_dir) if self.job.train_dataset else []
        )
        self.test_samples = (
            load_dataset_section(self.job.test_dataset, self.job.base_dir) if self.job.test_dataset else None
        )

    def plan(self) -> Any:
        """What ``train()`` would launch (the same as the CLI's ``--dry-run``)."""
        from aworld_core.jobs import plan_job
        from aworld_core.validation import validate_backend

        validate_backend(self.backend, self.job)  # its framework and the inputs training needs
        plan, _ = plan_job(self.backend, self.job)
        return plan

    def train(self) -> Any:
        """Launch training on the backend; returns its ``TrainResult``."""
        from aworld_core.jobs import launch_job

        return launch_job(self.backend, self.job, self.plan())

    def evaluate(self, llm: Any = None, dataset: str = "test", concurrency: int | None = None,
                 output: str | Path | None = None, progress: bool = True) -> Any:
        """Run the agent on the test (or train) data with its own endpoint (or ``llm``) and score it."""
        import asyncio

        from aworld_core.evaluate import evaluate
        from aworld_core.tools.mcp_shared import closing_shared_sessions
        from aworld_core.worker.build import build_agent
        from aworld_core.worker.openai_agent import OpenAIAgent, training_only

        samples = self.test_samples if dataset == "test" else self.train_samples
        if samples is None:
            raise UsageError("no test data: pass test_dataset=... or evaluate(dataset='train')")
        if not samples:
            raise UsageError(f"the {dataset} dataset has no rows; evaluation needs at least one task")
        from aworld_core.jobs import job_environment

        target = output or self.job.resolved_output_dir() / f"eval_{dataset}.jsonl"
        with job_environment(self.job):  # the job's environment: as for training and --eval
            agent = build_agent(self.job, cache=False)
            if isinstance(agent, OpenAIAgent):  # served the trained policy by the kit's gateway only
                raise training_only(agent.ref)
            return asyncio.run(closing_shared_sessions(evaluate(
                agent, samples, self.job.reward, llm=llm, concurrency=concurrency or self.job.rollout.concurrency,
                output=target, progress=progress, timeout=self.job.rollout.timeout_for(agent),
                max_steps=self.job.rollout.max_turns,
                base_dir=self.job.base_dir,
            ), agent))
