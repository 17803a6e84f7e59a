"""The ``verl.plugins`` entry point: ``import verl`` loads this module in every verl process.

It installs aworld-verl's seams (``aworld_verl.seams``: the CPU platform, the CPU process group,
the ``external_vllm`` rollout and the FSDP engines for device ``cpu``). verl swallows a plugin's
import error into a debug log line, so a failure here is logged as a warning too.
"""

from __future__ import annotations

import logging

try:
    from aworld_verl.seams import install

    install()
except Exception as exc:  # verl would hide it: say it once, loudly
    logging.getLogger("aworld_verl").warning("aworld-verl could not install its verl seams: %r", exc)
    raise
