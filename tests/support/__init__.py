"""Test-suite-private helpers: an OpenAI stub, a fault-injecting proxy, fake distributions, a fake clock.

The tiny model, its chat templates and the MCP test server ship with the core as ``aworld_core.testing``.
"""
