"""The ms-swift external plugin of aworld-swift: ``--external_plugins <this file>``.

ms-swift imports this file by path (``swift rlhf --external_plugins ...``) in every process it
starts; importing it registers, in ms-swift's own registries:

* ``multi_turns['aworld']``: :class:`aworld_swift.scheduler.AworldScheduler`
  (``--multi_turn_scheduler aworld``);
* ``orms['aworld']`` (the job's reward) and ``orms['aworld_<name>']`` for every reward the core's
  plugins register (``--reward_funcs aworld`` or e.g. ``aworld_gsm8k aworld_format``);
* ``callbacks_map['aworld']``: :class:`aworld_swift.callback.AworldCallback` (``--callbacks aworld``).

It wraps ms-swift's trainer where a trajectory of several training segments (a compacted or
rewritten conversation) becomes one batch row per segment (:mod:`aworld_swift.segments`).

Where vLLM's CPU build is installed it also wraps ms-swift's colocate weight sync
(:mod:`aworld_swift.vllm_cpu_sync`), which otherwise fails on that backend, and makes its server
mode run on a CPU (:mod:`aworld_swift.server_sync`: the rollout server's device check and worker
extension, the trainer's sending of weights).

The job itself is read lazily (``AWORLD_SWIFT_JOB``), when ms-swift first builds one of them.
"""

from __future__ import annotations

from swift.callbacks import callbacks_map
from swift.rewards import orms
from swift.rollout.multi_turn import multi_turns

from aworld_swift.callback import AworldCallback
from aworld_swift.rewards import reward_classes
from aworld_swift.scheduler import AworldScheduler
from aworld_swift.segments import install as install_segments
from aworld_swift.server_sync import install as install_server_sync
from aworld_swift.vllm_cpu_sync import install as install_vllm_cpu_sync


def _registered_reward_names() -> list[str]:
    from aworld_core import get_plugin_manager

    return sorted(get_plugin_manager().catalog().items("reward"))


multi_turns["aworld"] = AworldScheduler
orms.update(reward_classes(_registered_reward_names()))
callbacks_map["aworld"] = AworldCallback
install_segments()
install_vllm_cpu_sync()
install_server_sync()
