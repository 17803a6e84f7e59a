"""AReaL's RPC worker (``areal.infra.rpc.rpc_server``) on a host whose only interface is loopback.

``make test`` runs in a network namespace with only ``lo``, where this machine's hostname resolves
to 127.0.0.1: AReaL's ``gethostip`` skips loopback addresses, probes a route to 8.8.8.8 and raises
"Could not determine host IP". The worker's guard app imports ``gethostip`` from
``areal.utils.network`` when it configures itself, so pointing that at 127.0.0.1 first lets AReaL's
own worker ``main`` run unchanged (the scheduler and its workers are all on this host).
"""

from __future__ import annotations


def main() -> None:
    import areal.utils.network as network

    network.gethostip = lambda *args, **kwargs: "127.0.0.1"
    from areal.infra.rpc import rpc_server

    rpc_server.main()


if __name__ == "__main__":
    main()
