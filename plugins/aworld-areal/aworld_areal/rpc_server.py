"""AReaL's RPC worker (``python -m areal.infra.rpc.rpc_server``) with aworld-areal's CPU fixes in place.

In single-controller mode AReaL's scheduler starts the workers from ``scheduling_spec.cmd``; the
actor's FSDP engine then runs in such a worker, not in ``aworld_areal.train``'s process, so the
fixes that process installs (``packed_attention``: packed sequences attend apart under ``sdpa``;
``without_triton``: AReaL's saver without triton) must be installed there too. The CPU defaults
name this module as the workers' command; it installs them and runs AReaL's own worker ``main``.
"""

from __future__ import annotations


def main() -> None:
    from areal.infra.rpc import rpc_server

    from aworld_areal import packed_attention, without_triton

    packed_attention.install()  # only used by models with attn_impl sdpa
    without_triton.install()
    rpc_server.main()


if __name__ == "__main__":
    main()
