"""Agents: ``Agent``/``AgentConfig`` (agent.py), ``Swarm`` (swarm.py), ``CompactionConfig`` / ``TRUNCATED`` (compaction.py), ``agent_from_job`` (factory.py)."""

from aworld_core.agents.agent import Agent, AgentConfig
from aworld_core.agents.compaction import TRUNCATED, CompactionConfig
from aworld_core.agents.swarm import Swarm

__all__ = ["Agent", "AgentConfig", "CompactionConfig", "Swarm", "TRUNCATED"]
